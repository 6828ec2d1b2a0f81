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
    lora_groups,
    lora_parameters,
    mark_only_lora_trainable,
)
from icml25.knowledge_swap.losses import bounded_forget_loss, group_sparse_loss, swap_losses
from icml25.knowledge_swap.metrics import (
    accuracy_on,
    h_mean,
    layer_norms,
    linear_probe_by_layer,
    swap_metrics,
)
from icml25.knowledge_swap.swap import KnowledgeSwapper, SwapHistory

__all__ = [
    "KnowledgeSwapper",
    "LoRAConv2d",
    "LoRALinear",
    "SwapHistory",
    "accuracy_on",
    "bounded_forget_loss",
    "expand_head",
    "group_sparse_loss",
    "h_mean",
    "inject_lora",
    "layer_norms",
    "linear_probe_by_layer",
    "lora_groups",
    "lora_parameters",
    "mark_only_lora_trainable",
    "swap_losses",
    "swap_metrics",
]
