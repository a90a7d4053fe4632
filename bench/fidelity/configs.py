"""The benchmark's rows: every run of measured_dev.json (a copy of the shared reference, so the
benchmark does not depend on /work/shared), turned into model + mesh configurations."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

from model import GPT3_175B, ModelConfig, RunConfig, maxtext_scaled

HERE = pathlib.Path(__file__).resolve().parent
MEASURED = HERE / "measured_dev.json"

# MLPerf v4.0 GPT-3 on v5p: a slice is 512 chips (v5p-1024, 8x8x8) with ici fsdp 64 x tensor 8;
# larger systems join slices of that size over DCN (assumption: the submission's multi-slice layout).
GPT3_SLICE_CHIPS = 512
GPT3_SLICE_TOPOLOGY = "8x8x8"
GPT3_SEQ = 2048


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    chip: str
    topology: str  # of one slice
    slices: int
    run: RunConfig
    causal_attention_flops: bool  # the FLOP formula of the published MFU
    measured_mfu: float | None = None
    measured_tokens_per_s_per_chip: float | None = None

    @property
    def chips(self) -> int:
        return self.run.chips


def _v4_22b() -> ModelConfig:
    return ModelConfig(kind="maxtext_v4", emb=6144, heads=24, head_dim=256, mlp=24576, layers=48, vocab=32768)


def rows() -> list[Row]:
    data = json.loads(MEASURED.read_text())
    out = []
    for r in data["runs"]:
        is_v4 = r["chip"] == "v4"
        model = _v4_22b() if is_v4 else maxtext_scaled(r["global_parameter_scale"])
        run = RunConfig(
            model=model,
            per_device_batch=r["per_device_batch"],
            seq=r["seq"],
            dcn_data=r["dcn_data"],
            ici_fsdp=r["ici_fsdp"],
            ici_tensor=r["ici_tensor"],
            flash=not is_v4,  # the v4 runs used plain dot-product attention
            iota_embed=not is_v4,  # the v5e launch scripts pass use_iota_embed=true
        )
        slice_chips = math.prod(int(d) for d in r["topology"].split("x"))
        assert slice_chips * r["slices"] == run.chips, r["id"]
        out.append(
            Row(r["id"], r["chip"], r["topology"], r["slices"], run, not is_v4, measured_mfu=r["mfu"])
        )
    for m in data["mlperf_training_v4_0_gpt3_175b"]["measured"]:
        chips = m["chips"]
        slices = chips // GPT3_SLICE_CHIPS
        run = RunConfig(
            model=GPT3_175B,
            per_device_batch=m["global_batch"] // chips,
            seq=GPT3_SEQ,
            dcn_data=slices,
            ici_fsdp=64,
            ici_tensor=8,
            flash=True,
        )
        assert run.global_batch == m["global_batch"], m
        out.append(
            Row(
                f"gpt3_175b_v5p_{chips}",
                "v5p",
                GPT3_SLICE_TOPOLOGY,
                slices,
                run,
                True,
                measured_tokens_per_s_per_chip=m["train_tokens_per_s_per_chip"],
            )
        )
    return out


def by_id() -> dict[str, Row]:
    return {r.id: r for r in rows()}
