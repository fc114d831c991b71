"""One parallel layout and its rules: the sizes train, plan, memory and comm all split a model by.

A layout is tp x pp x dp x cp ranks (Megatron-LM's grid, world = tp*pp*dp*cp), the routed experts'
etp x ep x edp grid folded over each stage's tp x cp x dp ranks (calc.parallel.expert_grid), vp model
chunks per pipeline rank, sequence parallelism, the micro-batch, the ZeRO stage and the pipeline schedule.
`Layout.validate` holds the rules that every calculator taking a layout shares, each an MlsysError
naming it (exit 2 through the CLI):

- every size a positive integer; zero 0, 1, 2 or 3;
- tp*pp*dp*cp == gpus, where the command knows the GPUs;
- vp > 1 needs pp > 1 and the 1F1B schedule (Megatron-LM's interleaved schedule splits a pipeline's 1F1B);
- seq % (2*cp) == 0 with cp > 1: context parallelism as Megatron-LM runs it (and torch's `context_parallel`
  with its load balancer) cuts each sequence into 2*cp chunks and gives rank r chunks r and 2cp-1-r, so the
  causal mask's work is even (megatron/core/utils.py `get_batch_on_this_cp_rank`); seq % cp alone admits
  lengths that neither framework can shard;
- (seq/cp) % tp == 0 with sequence parallelism on (tp > 1): each TP rank holds seq/(cp*tp) tokens between
  the tensor-parallel regions (Korthikanti et al. 2022, section 4.2.2);
- the experts' rules of `ExpertGrid.validate` and `check_experts` (ep divides the routed experts, etp x ep
  divides tp*cp*dp; MoE parallel folding).

What only one calculator needs stays with it: the layer split over pp x vp (each has its own pipeline split),
the attention heads over tp (train checks them once per tp, the costly one), node placement (train, plan),
the optimizer and offload (memory), the collective order (comm).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import divide, require
from ...specs.model import ModelSpec
from .expert_grid import ExpertGrid, check_experts

SIZES = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch")


@dataclass(frozen=True)
class Layout:
    """tp x pp x dp x cp ranks, the experts' ep (etp) grid, vp chunks, sp, micro-batch, ZeRO and schedule."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel size; None: tp (Megatron-Core's default)
    vp: int = 1
    sp: bool = False
    micro_batch: int = 1
    zero: int = 0
    schedule: str = "1f1b"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def sp_active(self) -> bool:
        return self.sp and self.tp > 1

    @property
    def experts(self) -> ExpertGrid:
        return ExpertGrid(tp=self.tp, cp=self.cp, dp=self.dp, ep=self.ep, etp=self.etp)

    def validate(self, spec: ModelSpec, seq: int, gpus: int | None = None, *, node: int | None = None,
                 megatron: bool = False, gpus_flag: str = "--gpus") -> None:
        """Every shared rule (the module docstring), in order: sizes and schedule, world, sequence, experts.
        `gpus_flag` names the option that gave `gpus` (`mlsys memory` calls it --world-size)."""
        self.validate_sizes()
        if gpus is not None:
            self.validate_world(gpus, gpus_flag)
        self.validate_sequence(seq)
        check_experts(spec, self.tp, self.ep, self.etp)
        self.experts.validate(spec, sp=self.sp_active, node=node, megatron=megatron)

    def validate_sizes(self) -> None:
        for name in SIZES:
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        require(self.etp is None or (isinstance(self.etp, int) and self.etp >= 1),
                f"--etp must be a positive integer, got {self.etp}")
        require(self.zero in (0, 1, 2, 3), f"--zero must be 0, 1, 2 or 3, got {self.zero}")
        require(self.vp == 1 or self.pp > 1, "rule vp needs pp > 1: the interleaved schedule splits a pipeline")
        self.validate_schedule()

    def validate_schedule(self) -> None:
        require(self.vp == 1 or self.schedule == "1f1b",
                f"--vp interleaves the 1F1B schedule: not with --schedule {self.schedule}")

    def validate_world(self, gpus: int, flag: str = "--gpus") -> None:
        require(self.gpus == gpus, f"rule tp*pp*dp*cp == gpus: {self.tp}*{self.pp}*{self.dp}*{self.cp} = {self.gpus}, "
                                   f"not {flag} {gpus}")

    def validate_sequence(self, seq: int) -> None:
        if self.cp > 1:
            divide(seq, 2 * self.cp, "rule seq % (2*cp) == 0: load-balanced context parallelism splits each "
                                     "sequence into 2*cp chunks")
        if self.sp_active:
            divide(seq // self.cp, self.tp, "rule (seq/cp) % tp == 0 with --sp")
