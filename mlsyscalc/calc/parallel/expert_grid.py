"""Megatron-Core's MoE parallel folding: the routed experts' own grid inside each pipeline stage, and its rules.

Megatron-Core builds two rank grids over the same GPUs (NVIDIA/Megatron-LM at d98e8a6,
megatron/core/parallel_state.py, `initialize_model_parallel` and `RankGenerator`, default order
tp-cp-ep-dp-pp): the attention and dense layers' tp x cp x dp x pp, and the MoE layers' etp x ep x edp x pp
(the same order with cp = 1), where `expert_tensor_parallel_size` defaults to `tensor_model_parallel_size`
(parallel_state.py and megatron/core/model_parallel_config.py `__post_init__`) and the expert data-parallel
size is edp = world / (etp x ep x pp). Both grids keep pp outermost, so the tp x cp x dp ranks of a pipeline
stage are also its etp x ep x edp ranks, numbered etp innermost: consecutive ranks form an expert tensor-parallel
group, ranks etp apart an expert-parallel group (the all-to-all), ranks etp x ep apart an expert data-parallel
group (the routed experts' gradient reduction and their ZeRO shards). The expert group is decoupled from the
attention's TP, CP and DP: ep may exceed dp (MoE Parallel Folding, Liu et al. 2025, arXiv:2504.14960).

The rules (`ExpertGrid.validate`), each an MlsysError naming it:

- ep > 1 or an etp other than tp only for a model with routed experts;
- experts % ep == 0 (megatron/training/arguments.py: "Number of experts should be a multiple of expert model
  parallel_size");
- tp*cp*dp % (etp*ep) == 0: parallel_state.py raises unless world_size % (etp x ep x pp) == 0, and the world is
  tp x cp x dp x pp;
- every routed expert's split width % etp == 0 (its column-parallel fc1 and row-parallel fc2 split over etp);
- Megatron-LM's code (`megatron=True`: `mlsys train` and `plan` with --framework megatron; the memory and
  traffic of a layout do not need them): etp == 1 where the experts have biases (transformer_config.py:
  "Bias in Moe is only supported when ETP==1"); --sp with tp > 1 on an MoE model (megatron/core/transformer/
  moe/moe_layer.py, `MoELayer.forward` raises in training when the attention's TP group has more than one
  rank and sequence parallelism is off): the MoE layer takes the sequence-split tokens;
- an etp other than tp with tp > 1 needs --sp (the experts gather the sequence-split tokens of their etp ranks);
- ETP within a node (`node`), as TP: the expert TP all-gather and reduce-scatter run every MoE layer.

Where each group sits on the nodes is `comm_step.placement` of `groups()` (the whole-groups-per-node rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import MlsysError, divide, require
from ...specs.model import ModelSpec
from .tensor_parallel import check_tp

ETP_DEFAULT = "the --tp value (Megatron-Core's default)"


@dataclass(frozen=True)
class ExpertGrid:
    """The routed experts' grid of one pipeline stage: etp x ep x edp over its tp x cp x dp ranks."""

    tp: int = 1
    cp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel size; None: tp (Megatron-Core's default)

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def stage_ranks(self) -> int:
        """tp x cp x dp: the ranks of one pipeline stage, which the expert grid folds over."""
        return self.tp * self.cp * self.dp

    @property
    def edp(self) -> int:
        """Expert data-parallel size: the ranks holding the same routed-expert shard (tp*cp*dp / (etp*ep))."""
        return self.stage_ranks // (self.expert_tp * self.ep)

    def groups(self) -> dict[str, tuple[int, int]]:
        """(size, stride) of each expert group inside a stage, etp innermost (Megatron-Core's expert order)."""
        etp = self.expert_tp
        return {"etp": (etp, 1), "ep": (self.ep, etp), "edp": (self.edp, etp * self.ep)}

    def validate(self, spec: ModelSpec, *, sp: bool, node: int | None = None, megatron: bool = False) -> None:
        """The folding rules (module docstring); `node`: GPUs of one scale-up domain (ETP within it)."""
        check_experts(spec, self.tp, self.ep, self.etp)
        etp, moe = self.expert_tp, spec.moe
        if moe is None:
            return
        require(self.stage_ranks % (etp * self.ep) == 0,
                f"rule tp*cp*dp % (etp*ep) == 0: the expert grid etp x ep x edp folds into each pipeline stage's "
                f"tp*cp*dp = {self.tp}*{self.cp}*{self.dp} = {self.stage_ranks} ranks; etp*ep = {etp}*{self.ep} = "
                f"{etp * self.ep} does not divide it (Megatron-Core: world_size % (etp*ep*pp) == 0; --etp defaults "
                f"to --tp; fine-grained MoE recipes set --etp 1)")
        check_tp(spec, self.tp, experts=etp)  # every routed expert's split width over etp
        if megatron:  # Megatron-Core's own refusals (a training run of its code: train, plan)
            require(not moe.expert_bias or etp == 1, f"rule etp == 1 with expert biases: {spec.name}'s experts have "
                                                     f"biases, --etp {etp} (Megatron-Core: bias in MoE only with ETP 1)")
            require(sp or self.tp == 1, f"rule --sp with --tp {self.tp} on an MoE model: Megatron-Core's MoE layer "
                                        "refuses tensor parallelism without sequence parallelism in training")
        require(etp == self.tp or sp or self.tp == 1,
                f"rule --etp {etp} other than --tp {self.tp} needs --sp: the experts gather the sequence-split "
                "tokens of their etp ranks")
        if node is not None:
            require(etp <= node and node % etp == 0, f"rule ETP within a node: --etp {etp} must divide the {node} GPUs "
                                                     "of a node, as --tp")


def check_experts(spec: ModelSpec, tp: int, ep: int, etp: int | None) -> None:
    """The rules of the model alone (the first of `ExpertGrid.validate`'s, which a layout checks before its
    sizes): ep and an etp other than tp need routed experts, experts % ep == 0."""
    require(etp is None or (isinstance(etp, int) and etp >= 1), f"--etp must be a positive integer, got {etp}")
    if spec.moe is None:
        if ep > 1:
            raise MlsysError(f"--ep {ep}: {spec.name} has no routed experts")
        require(etp is None or etp == tp, f"--etp {etp}: {spec.name} has no routed experts")
        return
    divide(spec.moe.num_experts, ep, "rule experts % ep == 0: routed experts over --ep (Megatron-Core: "
                                     "num_experts % expert_model_parallel_size)")
