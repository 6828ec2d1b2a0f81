"""Knowledge swapping: forget chosen classes, keep the rest and learn new ones, with LoRA and the
"Learning Before Forgetting" strategy (Xing, Cheng, Tang, Wang, Zhong, Wang, ICML 2025,
arXiv:2502.08075).

    >>> inject_lora(model, ["mlp.fc1", "mlp.fc2"], r=8, alpha=1)     # any nn.Module
    >>> swapper = KnowledgeSwapper(model, strategy="learn_then_forget")
    >>> swapper.fit(retain=(x_r, y_r), forget=(x_f, y_f), learn=(x_l, y_l))
    >>> swapper.evaluate(retain_test, forget_test, learn_test)      # acc_r, acc_f, acc_l, h
"""

from icml25._moved import moved as _moved
from icml25.knowledge_swap.lora import expand_head, inject_lora
from icml25.knowledge_swap.metrics import membership_inference, relearn_time
from icml25.knowledge_swap.splits import split_by_class
from icml25.knowledge_swap.swap import KnowledgeSwapConfig, KnowledgeSwapper, SwapHistory

__all__ = [
    "KnowledgeSwapConfig",
    "KnowledgeSwapper",
    "SwapHistory",
    "expand_head",
    "inject_lora",
    "membership_inference",
    "relearn_time",
    "split_by_class",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "LoRAConv2d": "icml25.lora",
        "LoRALinear": "icml25.lora",
        "accuracy_on": "metrics",
        "bounded_forget_loss": "losses",
        "frozen_norm_layers": "swap",
        "global_cross_entropy": "parallel",
        "group_sparse_loss": "losses",
        "h_mean": "metrics",
        "layer_norms": "metrics",
        "linear_probe_by_layer": "metrics",
        "load_lora": "icml25.lora",
        "lora_groups": "lora",
        "lora_layers": "icml25.lora",
        "lora_parameters": "icml25.lora",
        "lora_state_dict": "icml25.lora",
        "mark_only_lora_trainable": "icml25.lora",
        "merge_lora": "icml25.lora",
        "save_lora": "icml25.lora",
        "swap_losses": "losses",
        "swap_metrics": "metrics",
        "unload_lora": "icml25.lora",
        "unmerge_lora": "icml25.lora",
    },
)
