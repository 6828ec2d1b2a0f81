"""FPO at real scale: a TRL ``DPOTrainer`` whose loss is FPO (paper Eq. 11), so ``accelerate
launch`` (DDP, FSDP, DeepSpeed), PEFT, gradient checkpointing and TRL's logging work unchanged.

The reference half of the offline cache is TRL's own ``precompute_ref_log_probs=True`` (summed
reference log-probs per response; ``A_ref = sum / |y|``). The feature half is computed once at
construction: the reference model (``ref_model``, else the policy before training) runs over the
tokenized training set, and the pooled SAE codes of each response are kept as a
:class:`~icml25.fpo.cache.ReferenceCache`, looked up by an ``fpo_idx`` column added to the data.
``ref_cache_path`` saves it (safetensors) and reuses it on the next run after checking its
fingerprints. Each training step is one policy forward with a hook on block ℓ.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from icml25.fpo.cache import ReferenceCache, _CacheParts, _model_fingerprint
from icml25.fpo.forward import pool_response_codes, preference_pass
from icml25.fpo.hooks import ResidualCapture, resolve_layer
from icml25.fpo.losses import INDEX_MODES, POOL_MODES, fpo_loss
from icml25.fpo.sae import SparseAutoencoder

try:
    from trl import DPOConfig, DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference
except ImportError as e:  # pragma: no cover
    raise ImportError("FPOTrainer needs TRL: pip install 'icml25[train]'") from e

__all__ = ["FPOTrainer", "IndexedPreferenceCollator"]

IDX = "fpo_idx"


class IndexedPreferenceCollator(DataCollatorForPreference):
    """TRL's preference collator that also passes each example's ``fpo_idx``."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().torch_call(examples)
        if examples and IDX in examples[0]:
            out[IDX] = torch.tensor([int(e[IDX]) for e in examples])
        return out


def _fingerprint(ex: dict[str, Any]) -> str:
    import hashlib

    key = [list(ex["prompt_ids"]), list(ex["chosen_ids"]), list(ex["rejected_ids"])]
    return hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16]


class FPOTrainer(DPOTrainer):
    """``trl.DPOTrainer`` with the FPO loss.

    Args (beyond ``DPOTrainer``'s):
        sae: the frozen :class:`~icml25.fpo.sae.SparseAutoencoder` of block ``layer``.
        layer: the decoder block whose residual output the SAE reads (paper: 25 of Gemma-2-2B).
        fpo_alpha: α of Eq. 11 (0.5, Table 5); β is ``args.beta`` (0.1, Table 5).
        k, index_mode, pool, stop_grad_chosen: as in :func:`~icml25.fpo.losses.fpo_loss`
            (50, "union", "mean", True).
        ref_cache_path: a ``.safetensors`` file for the feature cache (reused when it matches).

    ``args`` must have ``precompute_ref_log_probs=True`` (FPO's reference is offline); when
    ``args`` is None a ``DPOConfig`` with it (and bf16 only where CUDA has it) is made.
    """

    def __init__(self, model: Any, ref_model: Any = None, args: DPOConfig | None = None,
                 data_collator: Any = None, train_dataset: Any = None, *,
                 sae: SparseAutoencoder, layer: int, fpo_alpha: float = 0.5, k: int = 50,
                 index_mode: str = "union", pool: str = "mean", stop_grad_chosen: bool = True,
                 ref_cache_path: str | os.PathLike | None = None, **kwargs: Any) -> None:  # fmt: skip
        if not isinstance(sae, SparseAutoencoder):
            raise TypeError(f"sae must be an icml25.fpo.SparseAutoencoder (load_gemma_scope_npz, "
                            f"from_sae_lens, train_sae), got {type(sae).__name__}")  # fmt: skip
        if index_mode not in INDEX_MODES:
            raise ValueError(f"index_mode must be one of {INDEX_MODES}, got {index_mode!r}")
        if pool not in POOL_MODES:
            raise ValueError(f"pool must be one of {POOL_MODES}, got {pool!r}")
        if isinstance(fpo_alpha, bool) or not isinstance(fpo_alpha, (int, float)) or fpo_alpha < 0:
            raise ValueError(f"fpo_alpha must be a number >= 0, got {fpo_alpha!r}")
        if args is None:
            bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            args = DPOConfig("fpo-output", precompute_ref_log_probs=True, bf16=bf16,
                             report_to=[])  # fmt: skip
        if not getattr(args, "precompute_ref_log_probs", False):
            raise ValueError("FPOTrainer needs DPOConfig(precompute_ref_log_probs=True): FPO's "
                             "reference is offline (paper §3)")  # fmt: skip
        if list(getattr(args, "loss_type", ["sigmoid"])) not in (["sigmoid"], ["sigmoid_norm"]):
            raise ValueError(f"FPOTrainer replaces the loss; leave loss_type at its default, got "
                             f"{args.loss_type!r}")  # fmt: skip
        if not isinstance(model, str):
            self.fpo_layer = resolve_layer(model, layer)
            hidden = getattr(getattr(model, "config", None), "hidden_size", None)
            if hidden is not None and hidden != sae.d_in:
                raise ValueError(f"the SAE's d_in={sae.d_in} differs from the model's hidden size "
                                 f"{hidden}")  # fmt: skip
        else:
            raise TypeError("pass the loaded model (AutoModelForCausalLM.from_pretrained(...)), "
                            "not its name: the SAE's layer is checked against it")  # fmt: skip
        if train_dataset is None:
            raise ValueError("train_dataset is required")
        if isinstance(train_dataset, (list, tuple)):
            from datasets import Dataset

            from icml25.fpo.data import load_preferences

            train_dataset = Dataset.from_list(load_preferences(list(train_dataset)))
        if IDX not in getattr(train_dataset, "column_names", []):
            train_dataset = train_dataset.map(lambda _ex, i: {IDX: i}, with_indices=True)
        processing_class = kwargs.get("processing_class")
        if data_collator is None:
            tok = processing_class
            pad = getattr(tok, "pad_token_id", None)
            pad = pad if pad is not None else getattr(tok, "eos_token_id", None)
            if pad is None:
                raise ValueError("FPOTrainer needs processing_class= (a tokenizer with a pad or "
                                 "EOS token)")  # fmt: skip
            data_collator = IndexedPreferenceCollator(
                pad_token_id=pad, max_length=args.max_length, truncation_mode=args.truncation_mode,
                pad_to_multiple_of=getattr(args, "pad_to_multiple_of", None))  # fmt: skip
        self.sae = sae.requires_grad_(False)
        self.fpo_alpha, self.fpo_k = float(fpo_alpha), k
        self.fpo_index_mode, self.fpo_pool = index_mode, pool
        self.fpo_stop_grad_chosen = bool(stop_grad_chosen)
        super().__init__(model, ref_model, args, data_collator, train_dataset, **kwargs)
        self.fpo_cache = self._feature_cache(ref_cache_path)

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if IDX not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, IDX]

    @torch.no_grad()
    def _feature_cache(self, path: str | os.PathLike | None) -> ReferenceCache:
        ds = self.train_dataset
        fps = [_fingerprint(ds[i]) for i in range(len(ds))]
        idx = [int(ds[i][IDX]) for i in range(len(ds))]
        model = self.ref_model if self.ref_model is not None else self.model
        if path is not None and os.path.isfile(path):
            cache = ReferenceCache.load(path)
            try:
                cache.check_compatible(layer=self.fpo_layer, sae=self.sae, pool=self.fpo_pool,
                                       site="hook", model=model)  # fmt: skip
                if len(cache) != len(idx):
                    raise RuntimeError(f"it holds {len(cache)} pairs, the data {len(idx)}")
                cache.verify(idx, fps)
                return cache
            except RuntimeError as e:
                import warnings

                warnings.warn(f"the reference cache {os.fspath(path)} does not match this run "
                              f"({e}); rebuilding it", stacklevel=3)  # fmt: skip
        was = model.training
        model.eval()
        dev = next(model.parameters()).device
        self.sae.to(dev)
        bs = self.args.precompute_ref_batch_size or self.args.per_device_train_batch_size
        parts = _CacheParts()
        try:
            for s in range(0, len(ds), bs):
                b = self.data_collator([ds[i] for i in range(s, min(len(ds), s + bs))])
                batch = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"],
                         "labels": b["input_ids"].masked_fill(b["completion_mask"] == 0, -100)}  # fmt: skip
                out = preference_pass(model, batch, sae=self.sae, layer=self.fpo_layer,
                                      pool=self.fpo_pool)  # fmt: skip
                parts.add(out, torch.tensor(idx[s : s + len(b["input_ids"]) // 2]))
        finally:
            model.train(was)
        meta = {"d_sae": self.sae.d_sae, "layer": self.fpo_layer, "pool": self.fpo_pool,
                "site": "hook", "sae": self.sae.identity(), "fingerprints": fps,
                "model_fingerprint": _model_fingerprint(model)}  # fmt: skip
        cache = parts.build(meta)
        if path is not None and self.accelerator.is_main_process:
            cache.save(path)
        return cache

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        idx = inputs.pop(IDX, None)
        if idx is None:
            raise KeyError(f"the batch has no {IDX!r} column: use FPOTrainer's default collator "
                           "(or IndexedPreferenceCollator)")  # fmt: skip
        ids, att, comp = inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"]
        labels = ids.masked_fill(comp == 0, -100)
        with ResidualCapture(model, self.fpo_layer) as cap:
            out = model(input_ids=ids, attention_mask=att, labels=labels, fused_lm_head=True,
                        use_cache=False)  # fmt: skip
        h = cap.output
        if h is None or not h.requires_grad and torch.is_grad_enabled() and model.training:
            raise RuntimeError(
                f"the residual stream of block {self.fpo_layer} was captured without a gradient "
                "path (reentrant activation checkpointing?): set gradient_checkpointing_kwargs="
                "{'use_reentrant': False}"
            )
        shift = comp[:, 1:]
        tok_lp = out.log_probs[:, -shift.shape[1] :].float() * shift
        n = shift.sum(1).clamp(min=1).float()
        mean = tok_lp.sum(1) / n
        mw, ml = mean.chunk(2)
        nw, nl = n.chunk(2)
        ref_w = inputs["ref_chosen_logps"].float() / nw
        ref_l = inputs["ref_rejected_logps"].float() / nl
        sae = self.sae.to(h.device)
        mask = comp.bool()
        codes = pool_response_codes(sae.encode(h[mask].float()), mask, self.fpo_pool)
        cw, cl = codes.chunk(2)
        ref = self.fpo_cache.batch(idx.cpu(), h.device)
        o = fpo_loss(mw, ml, ref_w, ref_l, cw, cl, ref["ref_codes_w"], ref["ref_codes_l"],
                     beta=self.beta, alpha=self.fpo_alpha, k=self.fpo_k,
                     index_mode=self.fpo_index_mode, stop_grad_chosen=self.fpo_stop_grad_chosen)  # fmt: skip
        g = self.accelerator.gather_for_metrics
        m = self._metrics[mode]
        m["rewards/chosen"].append(g(o.reward_w).mean().item())
        m["rewards/rejected"].append(g(o.reward_l).mean().item())
        m["rewards/accuracies"].append(g((o.reward_w > o.reward_l).float()).mean().item())
        m["rewards/margins"].append(g(o.reward_w - o.reward_l).mean().item())
        m["fpo/d_chosen"].append(g(o.d_w.detach()).mean().item())
        m["fpo/d_rejected"].append(g(o.d_l.detach()).mean().item())
        return (o.loss, out) if return_outputs else o.loss
