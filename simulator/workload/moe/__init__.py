"""MoE costing: the routed-expert part of a MoE layer, per router draw, on one topology.

The router itself (loads, capacity, balancing) lives in :mod:`simulator.moe`; this
package turns its draws into seconds for the plan:

* :mod:`.draws`: which router draw each (MoE layer, micro-batch) of a step uses;
* :mod:`.layer`: :class:`MoECost`, the expert GEMMs, router, permute and the exposed
  all-to-all of one draw (numpy over many draws), with the host model of :mod:`.host`;
* :mod:`.dispatch`: the token dispatchers' exchanges (all-to-all, all-gather, DeepEP);
* :mod:`.part`: one MoE block's part record and the EP breakdown keys;
* :mod:`.plan`: the parts of every chunk and micro-batch at once for the plan;
* :mod:`.costs`: costs shared between plans that read the same draw table.
"""
