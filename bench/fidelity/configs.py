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

# MLPerf v4.0 GPT-3 on v5p, from the submission's launch scripts
# (mlcommons/training_results_v4.0 Google/benchmarks/gpt3/implementations/maxtext/v5p-<N>.sh):
# every system is one slice with ICI data parallelism. Topologies are the v5p slice shapes of
# those chip counts (the systems' JSONs name only the chip count): Cloud's default shape, except
# 6144 chips, which MaxText's own configs/v5p/gpt3_175b/v5p_12288.sh runs "on v5p-12288 slice,
# with a custom topology of 8x16x48" (its ICI mesh 16 x 48 x 8 cannot be laid on the default
# 16x16x24 without splitting a physical axis, which jax's create_device_mesh refuses).
GPT3_SEQ = 2048
# The submission's LIBTPU_INIT_ARGS (gpt3_175b_base.sh of the same MaxText scripts) set
# --xla_tpu_decompose_all_gather_einsum=true: all-gather + einsum run as collective matmuls.
GPT3_COMPILER_FLAGS = ("--collective-matmul",)
GPT3_RUNS = {  # chips: (topology, ici data, ici fsdp, ici tensor, per-device batch, remat policy)
    512: ("8x8x8", 1, 64, 8, 4, "full"),
    1024: ("8x8x16", 8, 16, 8, 2, "save_dot_except_logits_ffn1"),
    1536: ("8x12x16", 12, 16, 8, 2, "save_dot_except_logits_ffn1"),
    6144: ("8x16x48", 16, 48, 8, 1, "save_dot_except_logits"),
}


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
    # XLA:TPU flags of the run that tpusim models, as `tpusim analyze` flags.
    compiler_flags: tuple[str, ...] = ()

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
            data=r["dcn_data"],
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
        topology, dp, fsdp, tensor, pdb, remat = GPT3_RUNS[chips]
        run = RunConfig(
            model=GPT3_175B,
            per_device_batch=pdb,
            seq=GPT3_SEQ,
            data=dp,
            ici_fsdp=fsdp,
            ici_tensor=tensor,
            flash=True,
            remat=remat,
        )
        assert run.chips == chips and run.global_batch == m["global_batch"], m
        out.append(
            Row(
                f"gpt3_175b_v5p_{chips}",
                "v5p",
                topology,
                1,
                run,
                True,
                measured_tokens_per_s_per_chip=m["train_tokens_per_s_per_chip"],
                compiler_flags=GPT3_COMPILER_FLAGS,
            )
        )
    return out


def by_id() -> dict[str, Row]:
    return {r.id: r for r in rows()}
