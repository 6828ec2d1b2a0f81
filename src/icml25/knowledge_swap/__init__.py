"""Knowledge swapping: forget chosen classes, keep the rest and learn new ones, with LoRA and the
"Learning Before Forgetting" strategy (Xing, Cheng, Tang, Wang, Zhong, Wang, ICML 2025,
arXiv:2502.08075).

    >>> inject_lora(model, ["mlp.fc1", "mlp.fc2"], r=8, alpha=1)     # any nn.Module
    >>> swapper = KnowledgeSwapper(model, strategy="learn_then_forget")
    >>> swapper.fit(retain=(x_r, y_r), forget=(x_f, y_f), learn=(x_l, y_l))
    >>> swapper.evaluate(retain_test, forget_test, learn_test)      # acc_r, acc_f, acc_l, h
"""

from icml25.knowledge_swap.lora import (
    LoRAConv2d,
    LoRALinear,
    expand_head,
    inject_lora,
    load_lora,
    lora_groups,
    lora_layers,
    lora_parameters,
    lora_state_dict,
    mark_only_lora_trainable,
    merge_lora,
    save_lora,
    unload_lora,
    unmerge_lora,
)
from icml25.knowledge_swap.losses import bounded_forget_loss, group_sparse_loss, swap_losses
from icml25.knowledge_swap.metrics import (
    accuracy_on,
    h_mean,
    layer_norms,
    linear_probe_by_layer,
    membership_inference,
    relearn_time,
    swap_metrics,
)
from icml25.knowledge_swap.parallel import global_cross_entropy
from icml25.knowledge_swap.splits import split_by_class
from icml25.knowledge_swap.swap import (
    KnowledgeSwapConfig,
    KnowledgeSwapper,
    SwapHistory,
    frozen_norm_layers,
)

__all__ = [
    "KnowledgeSwapConfig",
    "KnowledgeSwapper",
    "LoRAConv2d",
    "LoRALinear",
    "SwapHistory",
    "accuracy_on",
    "bounded_forget_loss",
    "expand_head",
    "frozen_norm_layers",
    "global_cross_entropy",
    "group_sparse_loss",
    "h_mean",
    "inject_lora",
    "layer_norms",
    "linear_probe_by_layer",
    "load_lora",
    "lora_groups",
    "lora_layers",
    "lora_parameters",
    "lora_state_dict",
    "mark_only_lora_trainable",
    "membership_inference",
    "merge_lora",
    "relearn_time",
    "save_lora",
    "split_by_class",
    "swap_losses",
    "swap_metrics",
    "unload_lora",
    "unmerge_lora",
]
