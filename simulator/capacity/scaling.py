"""Model sizes as an axis: each size's parameters and compute-optimal tokens.

Compute-optimal tokens ``D = 20 N`` for a dense model of ``N`` parameters: Hoffmann et
al. 2022 ("Training Compute-Optimal Large Language Models", the Chinchilla paper), whose
compute-optimal 70B Chinchilla was trained on 1.4T tokens, 20 per parameter, in line with
the paper's Table 3 estimates). The Llama 3 paper's own scaling-law fit (Dubey et al. 2024,
Sec. 3.2.1) gives a compute-optimal 402B parameters on 16.55T tokens for its 3.8e25 FLOP
budget, about 41 tokens per parameter; pass
``tokens_per_param=41`` (``--tokens-per-param``) to use it instead. Parameters are
counted at TP 1 from the model's shapes (decoder layers + embedding and, when untied, the
output layer), as Megatron-LM's ``num_floating_point_operations`` counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import load_workload
from ..config.workload import Workload
from ..errors import ConfigError
from ..shape.params import layer_params

CHINCHILLA_TOKENS_PER_PARAM = 20.0  # Hoffmann et al. 2022, Table 3


def parameters(w: Workload) -> float:
    """Total parameters of a dense model (TP 1): layers, embedding, output layer."""
    if w.model.moe is not None:
        raise ConfigError("--model-sizes", w.model.name, "a dense model (the scaling law "
                          "used here is for dense models)")
    one = w.model_copy(update={"parallelism": w.parallelism.model_copy(
        update={"tensor": 1})})
    m = w.model
    embed = m.vocab_size * m.hidden_size * (2 if m.untie_embeddings_and_output_weights else 1)
    return m.num_layers * layer_params(one, False).total + embed + m.hidden_size


def model_rows(workload: Any, tokens: float | None, model_sizes: Sequence[str] | None,
               tokens_per_param: float = CHINCHILLA_TOKENS_PER_PARAM
               ) -> list[tuple[str, Any, float, float | None]]:
    """(model label, workload reference, tokens, parameters) for each model of the grid: the one
    ``workload`` with ``tokens``, or each of ``model_sizes`` with ``tokens`` if given,
    else its compute-optimal tokens."""
    if not model_sizes:
        return [("", workload, float(tokens), None)]
    names = model_sizes.split(",") if isinstance(model_sizes, str) else list(model_sizes)
    out = []
    for ref in (n.strip() for n in names if str(n).strip()):
        n = parameters(load_workload(ref))
        out.append((ref, ref, float(tokens) if tokens is not None else tokens_per_param * n,
                    n))
    return out
