"""Never-fitted runs whose miss a strict xfail holds, with the measured numbers and the physics
the model lacks. The accuracy bars leave these runs to their xfail, so the bars stay where they
are and a fix shows up as an XPASS (which fails the suite until the entry is removed)."""

from __future__ import annotations

# id -> the strict xfail that holds it
KNOWN_GAPS: dict[str, str] = {
    "mbridge2606-llama3-70b-sft-gb300-32g-mxfp8":
        "tests/test_validation_megatron_bridge.py::test_sft_mxfp8_costs_what_it_measured "
        "(-16.7 %: MXFP8 full training measured 12 % slower than FP8 on GB300, costed alike)",
    **{f"mlperf50-llama2-70b-lora-gb200-{n}g":
       "tests/test_validation_mlperf.py::test_the_cp8_lora_runs_within_the_bar (+19 %: "
       "all-to-all CP 8 under LoRA measured 29 % more GPU-seconds a sample than DP 8, priced 55 %)"
       for n in (72, 144, 512)},
    "mlperf51-llama31-8b-gb200-512g":
        "tests/test_validation_mlperf.py::test_the_shortest_8b_steps_within_the_bar (+16 %: a "
        "0.09 s step, most of the excess the per-step host wait fitted on steps of seconds)",
    "mlperf60-llama31-8b-gb200-1024g":
        "tests/test_validation_mlperf.py::test_the_shortest_8b_steps_within_the_bar (+33 %: a "
        "0.073 s step on 256 trays, 58 ms of it the priced host wait against the 36 ms left)",
    **{f"mbridge{r}-llama3-70b-gb200-64g-nvfp4":
       "tests/test_validation_megatron_bridge.py::test_the_gb200_nvfp4_70b_runs_within_the_bar "
       "(-16.1 / -14.2 %: GB200's NVFP4 efficiency is its FP8 value carried; the 405B NVFP4 rows "
       "of the same tables want it lower, these higher)" for r in ("2602", "260201")},
    "mlperf51-llama31-8b-nvfp4-b200-nebius-16g":
        "tests/test_validation_mlperf.py::test_the_multi_node_b200_nvfp4_runs_within_the_bar "
        "(-12.7 %: dgx-b200's NVFP4 efficiency is gb200-nvl72's FP8 value carried; every B200 "
        "NVFP4 run comes out fast)",
    "mlperf51-llama31-8b-nvfp4-b300-lenovo-8g":
        "tests/test_validation_mlperf.py::test_the_b300_nvfp4_runs_within_the_bar (-14.4 %: "
        "dgx-b300 is uncalibrated; its NVFP4 gain over B200 is priced 1.21x, measured 1.13x)",
    "mlperf41-gpt3-175b-h100-256g":
        "tests/test_validation_mlperf.py::test_the_mbs2_gpt3_runs_within_the_bar (+14.9 %: the "
        "tuned MBS 2 recipe's FP8 GEMMs run faster than the fitted efficiency prices them)",
    **{f"mlperf60-deepseek-v3-gb200-{n}g":
       "tests/test_validation_mlperf.py::test_the_gb200_deepseek_runs_within_the_bar (-18 .. "
       "-43 %: DeepSeek-V3 at TP 2 on GB200 loses more per step than priced, the more the "
       "fewer micro-batches a step; the GB300 runs of the recipe at TP 1 are within 3.2 %)"
       for n in (512, 2048, 4096, 8192)},
    "mlperf51-llama31-8b-h100-cisco-128g":
        "tests/test_validation_mlperf.py::test_the_cisco_h100_8b_runs_within_the_bar (-32 %: "
        "TP 2 saves 29 % of Cisco's step as measured, 44 % as priced)",
}
