"""FPO at real scale: a TRL ``DPOTrainer`` whose loss is FPO (paper Eq. 11), so PEFT, gradient
checkpointing, TRL's logging and data parallelism (``torchrun`` / ``accelerate launch``: DDP;
FSDP and DeepSpeed through accelerate, not run here) work unchanged. The loss is a mean over
pairs, and every process holds as many pairs, so DDP's gradient average is the global-batch mean
(tested: two gloo processes equal one; docs/fpo.md, "Several GPUs").

The reference half of the offline cache (paper §3, "Building Offline Reference Margin and
Constraint") is TRL's own ``precompute_ref_log_probs=True`` (summed reference log-probs per
response; ``A_ref = sum / |y|``). The feature half is computed alongside it, for every dataset TRL
precomputes (the training set and ``eval_dataset`` at construction, a dataset passed to
``evaluate`` later): the reference model (``ref_model``, else the policy before training, with a
PEFT adapter disabled) runs over the tokenized pairs and the pooled SAE codes of each response are
kept in a :class:`~icml25.fpo.cache.ReferenceCache`. The cache is keyed by each pair's CONTENT (a
63-bit hash of its prompt, chosen and rejected token ids, computed by the collator), never by its
row number, so an evaluation row never reads a training row's features, and under several
processes each process (which computes the whole cache) reads its own pairs' rows.
``ref_cache_path`` saves it (safetensors, rank 0) and reuses it on the next run after checking its
fingerprints. Each training step is one policy forward with a hook on block ℓ.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from typing import Any

import torch

from icml25._validate import as_bool, as_int, as_real
from icml25.fpo.cache import ReferenceCache, _CacheParts, _model_fingerprint
from icml25.fpo.forward import pool_response_codes, preference_pass
from icml25.fpo.hooks import ResidualCapture, resolve_layer
from icml25.fpo.losses import INDEX_MODES, POOL_MODES, fpo_loss, pool_positions
from icml25.fpo.sae import SparseAutoencoder
from icml25.llm.training import MixedPrecision

try:
    from trl import DPOConfig, DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference
except ImportError as e:  # pragma: no cover
    raise ImportError("FPOTrainer needs TRL: pip install 'icml25[train]'") from e

__all__ = ["FPOTrainer", "IndexedPreferenceCollator", "content_key"]

#: the batch entry holding each pair's content key (int64)
KEY = "fpo_key"
_COLS = ("index", "sum_w", "sum_l", "mean_w", "mean_l", "len_w", "len_l")


def content_key(example: dict[str, Any]) -> int:
    """A 63-bit key of one tokenized pair (``prompt_ids``, ``chosen_ids``, ``rejected_ids``):
    the same content gives the same key in any dataset, in any order."""
    ids = [[int(t) for t in example[c]] for c in ("prompt_ids", "chosen_ids", "rejected_ids")]
    digest = hashlib.sha1(json.dumps(ids).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class IndexedPreferenceCollator(DataCollatorForPreference):
    """TRL's preference collator that also passes each pair's content key (``fpo_key``), by which
    :class:`FPOTrainer` finds its cached reference features."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().torch_call(examples)
        out[KEY] = torch.tensor([content_key(e) for e in examples], dtype=torch.long)
        return out


def _concat(a: ReferenceCache | None, b: ReferenceCache) -> ReferenceCache:
    """The rows of ``a`` then those of ``b`` (same layer, SAE and pooling) as one cache."""
    if a is None or len(a) == 0:
        return b
    t = {k: torch.cat([a.tensors[k], b.tensors[k]]) for k in _COLS}
    for side in "wl":
        off_a, off_b = a.tensors[f"codes_{side}_offsets"], b.tensors[f"codes_{side}_offsets"]
        t[f"codes_{side}_offsets"] = torch.cat([off_a, off_b[1:] + off_a[-1]])
        for part in ("indices", "values"):
            name = f"codes_{side}_{part}"
            t[name] = torch.cat([a.tensors[name], b.tensors[name]])
    return ReferenceCache(t, dict(a.meta))


class FPOTrainer(DPOTrainer):
    """``trl.DPOTrainer`` with the FPO loss (paper Eq. 11).

    Args (beyond ``DPOTrainer``'s):
        sae: the frozen :class:`~icml25.fpo.sae.SparseAutoencoder` of block ``layer``.
        layer: the decoder block whose residual output the SAE reads (paper: 25 of Gemma-2-2B).
        fpo_alpha: α of Eq. 11 (0.5, Table 5); β is ``args.beta`` (0.1, Table 5).
        k, index_mode, pool, stop_grad_chosen: as in :func:`~icml25.fpo.losses.fpo_loss`
            (50, "union", "mean", True).
        ref_cache_path: a ``.safetensors`` file for the feature cache (reused when it matches).

    ``args`` must have ``precompute_ref_log_probs=True`` (FPO's reference is offline, §3).
    ``args=None`` takes :meth:`paper_args`: the paper's Table 5 settings (β 0.1, learning rate
    5e-7, batch 32, one epoch, 150 warm-up steps then constant, Adam), the official code's
    ``max_length`` 1024 and gradient clipping 1.0, a temporary output folder (nothing is written
    to the working directory; no checkpoints, ``trainer.save_model(path)`` saves), and bf16 only on
    a GPU that has it. ``eval_dataset`` and ``evaluate(dataset)`` work as in ``DPOTrainer``: their
    reference log-probs and features are precomputed like the training set's (after training has
    started that needs ``ref_model`` or a PEFT policy, as in TRL).
    """

    @staticmethod
    def paper_args(output_dir: str | os.PathLike | None = None, **overrides: Any) -> DPOConfig:
        """The ``DPOConfig`` of the paper's Table 5 (Gemma-2-2B) for FPO; ``overrides`` replace
        single fields (``FPOTrainer.paper_args(max_steps=100)``). ``output_dir`` defaults to a
        new temporary folder. Our choices where Table 5 is silent: the batch of 32 is per device
        (use ``gradient_accumulation_steps`` or fewer per device with several GPUs), TRL's AdamW
        with weight decay 0 (Adam, as Table 5), no checkpoint saving, bf16 only on a bf16 GPU."""
        bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        if output_dir is None:
            output_dir = tempfile.mkdtemp(prefix="icml25-fpo-")
        kwargs: dict[str, Any] = dict(
            precompute_ref_log_probs=True,  # paper §3: the reference is offline
            beta=0.1,  # Table 5
            learning_rate=5e-7,  # Table 5
            per_device_train_batch_size=32,  # Table 5 (batch size 32)
            num_train_epochs=1,  # Table 5
            lr_scheduler_type="constant_with_warmup",  # Table 5: warm-up, then constant
            warmup_steps=150,  # Table 5
            weight_decay=0.0,  # Table 5: Adam (AdamW without decay)
            max_grad_norm=1.0,  # official code, config
            max_length=1024,  # official code, config
            bf16=bf16,  # ours: mixed precision only where the GPU has bf16; CPU runs fp32
            activation_checkpointing_kwargs={"use_reentrant": False},  # the SAE hook needs it
            save_strategy="no",  # ours: save with trainer.save_model(path)
            report_to="none",
        )
        kwargs.update(overrides)
        return DPOConfig(os.fspath(output_dir), **kwargs)

    def __init__(
        self,
        model: Any,
        ref_model: Any = None,
        args: DPOConfig | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        *,
        sae: SparseAutoencoder,
        layer: int,
        fpo_alpha: float = 0.5,
        k: int = 50,
        index_mode: str = "union",
        pool: str = "mean",
        stop_grad_chosen: bool = True,
        ref_cache_path: str | os.PathLike | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(sae, SparseAutoencoder):
            raise TypeError(
                f"sae must be an icml25.fpo.SparseAutoencoder (load_gemma_scope_npz, "
                f"from_sae_lens, train_sae), got {type(sae).__name__}"
            )
        if index_mode not in INDEX_MODES:
            raise ValueError(f"index_mode must be one of {INDEX_MODES}, got {index_mode!r}")
        if pool not in POOL_MODES:
            raise ValueError(f"pool must be one of {POOL_MODES}, got {pool!r}")
        fpo_alpha = as_real("fpo_alpha", fpo_alpha, low=0.0)
        k = as_int("k", k, 1)
        stop_grad_chosen = as_bool("stop_grad_chosen", stop_grad_chosen)
        if args is None:
            args = self.paper_args()
        if not isinstance(args, DPOConfig):
            raise TypeError(
                f"args must be a trl.DPOConfig (or None for FPOTrainer.paper_args()), "
                f"got {type(args).__name__}"
            )
        if not getattr(args, "precompute_ref_log_probs", False):
            raise ValueError(
                "FPOTrainer needs DPOConfig(precompute_ref_log_probs=True): FPO's "
                "reference is offline (paper §3)"
            )
        if list(getattr(args, "loss_type", ["sigmoid"])) not in (["sigmoid"], ["sigmoid_norm"]):
            raise ValueError(
                f"FPOTrainer replaces the loss; leave loss_type at its default, got "
                f"{args.loss_type!r}"
            )
        if isinstance(model, (str, os.PathLike)):
            raise TypeError(
                "pass the loaded model (icml25.llm.load_model(path, device=..., "
                "dtype=...)), not its name: the SAE's layer is checked against it"
            )
        # float32 master weights for a bf16/fp16 checkpoint (the Trainer's AdamW would update
        # the low-precision weights in place); with bf16=True the Trainer autocasts the forward
        if isinstance(model, torch.nn.Module) and kwargs.get("peft_config") is None:
            MixedPrecision.prepare(model)
        self.fpo_layer = resolve_layer(model, layer)
        hidden = getattr(getattr(model, "config", None), "hidden_size", None)
        if hidden is not None and hidden != sae.d_in:
            raise ValueError(
                f"the SAE's d_in={sae.d_in} differs from the model's hidden size {hidden}"
            )
        if train_dataset is None:
            raise ValueError("train_dataset is required")
        train_dataset = self._as_dataset(train_dataset)
        if kwargs.get("eval_dataset") is not None:
            ev = kwargs["eval_dataset"]
            kwargs["eval_dataset"] = (
                {n: self._as_dataset(d) for n, d in ev.items()}
                if isinstance(ev, dict)
                else self._as_dataset(ev)
            )
        processing_class = kwargs.get("processing_class")
        if data_collator is None:
            tok = processing_class
            pad = getattr(tok, "pad_token_id", None)
            pad = pad if pad is not None else getattr(tok, "eos_token_id", None)
            if pad is None:
                raise ValueError(
                    "FPOTrainer needs processing_class= (a tokenizer with a pad or EOS token)"
                )
            data_collator = IndexedPreferenceCollator(
                pad_token_id=pad,
                max_length=args.max_length,
                truncation_mode=args.truncation_mode,
                pad_to_multiple_of=getattr(args, "pad_to_multiple_of", None),
            )
        self.sae = sae.requires_grad_(False)
        self.fpo_alpha, self.fpo_k = float(fpo_alpha), k
        self.fpo_index_mode, self.fpo_pool = index_mode, pool
        self.fpo_stop_grad_chosen = bool(stop_grad_chosen)
        self.fpo_cache_path = ref_cache_path
        self.fpo_cache: ReferenceCache | None = None
        self._fpo_cache_checked = False
        # DPOTrainer.__init__ precomputes the train/eval reference through _precompute_ref_logps
        super().__init__(model, ref_model, args, data_collator, train_dataset, **kwargs)

    @staticmethod
    def _as_dataset(ds: Any) -> Any:
        if isinstance(ds, (list, tuple)):
            from datasets import Dataset

            from icml25.fpo.data import load_preferences

            return Dataset.from_list(load_preferences(list(ds)))
        return ds

    def get_train_dataloader(self) -> Any:
        from icml25.llm.distributed import check_global_batches

        check_global_batches(self)  # several processes: the rows fill every global batch
        return super().get_train_dataloader()

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """``DPOTrainer.evaluate``; a list of records is taken too. A new dataset gets its
        reference log-probs and features precomputed first (see the class docstring)."""
        if isinstance(eval_dataset, (list, tuple)):
            eval_dataset = self._as_dataset(eval_dataset)
        return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)

    # -- the feature cache ---------------------------------------------------------------------

    def _precompute_ref_logps(self, dataset: Any, name: str, batch_size: int) -> Any:
        """TRL's reference log-probs, plus the pooled reference SAE codes of every pair whose
        content the feature cache does not hold yet (same reference model, same collator)."""
        from datasets import Dataset

        from icml25.llm.distributed import world_size

        if world_size() > 1 and isinstance(dataset, Dataset) and not dataset.cache_files:
            out = self._ref_logps_in_memory(dataset, batch_size)
        else:
            out = super()._precompute_ref_logps(dataset, name, batch_size)
        self._add_features(out, batch_size)
        return out

    @torch.no_grad()
    def _ref_logps_in_memory(self, dataset: Any, batch_size: int) -> Any:
        """TRL's reference pass for a dataset held in memory (``Dataset.from_list``, a list of
        records) under several processes. TRL shards the pass over the processes, gathers the
        values and lets rank 0 write them to a cache file beside the dataset, which every rank
        then opens; an in-memory dataset's file lies in rank 0's own temporary folder, so the
        other ranks fail (FileNotFoundError). The same sharded pass (TRL's
        ``compute_ref_log_probs``) and gather leave every rank with all values, in dataset
        order, which each rank adds as the two columns TRL adds."""
        from datasets import Dataset, concatenate_datasets
        from torch.utils.data import DataLoader

        loader = self.accelerator.prepare(
            DataLoader(
                dataset,
                batch_size=batch_size,
                collate_fn=self.data_collator,
                num_workers=self.args.dataloader_num_workers,
                pin_memory=self.args.dataloader_pin_memory,
                shuffle=False,
            )
        )
        if self.ref_model is None and self.is_deepspeed_enabled:  # as TRL: one inference engine
            if getattr(self, "_precompute_engine", None) is None:
                from trl.models import prepare_deepspeed

                self._precompute_engine = prepare_deepspeed(self.model, self.accelerator)
            model = self._precompute_engine
        else:
            model = self.ref_model or self.model
        chosen, rejected = [], []
        for batch in loader:
            w, lo = self.compute_ref_log_probs(model, batch)
            w, lo = self.accelerator.gather_for_metrics((w, lo))
            chosen.append(w.float().cpu())
            rejected.append(lo.float().cpu())
        cols = Dataset.from_dict(
            {
                "ref_chosen_logps": torch.cat(chosen).numpy(),
                "ref_rejected_logps": torch.cat(rejected).numpy(),
            }
        )
        return concatenate_datasets([dataset, cols], axis=1)

    def _reference(self) -> tuple[Any, contextlib.AbstractContextManager]:
        """The model TRL takes as the reference (``ref_model``, else the policy; a PEFT policy
        with its adapter disabled)."""
        if self.ref_model is not None:
            return self.ref_model, contextlib.nullcontext()
        from accelerate.utils import is_peft_model

        if is_peft_model(self.model):
            from trl.trainer.utils import use_adapter

            unwrapped = self.accelerator.unwrap_model(self.model)
            name = "ref" if "ref" in unwrapped.peft_config else None
            return self.model, use_adapter(unwrapped, adapter_name=name)
        return self.model, contextlib.nullcontext()

    def _load_cache(self, model: Any) -> None:
        """Once: the saved cache at ``ref_cache_path`` when it was built with this run's layer,
        SAE, pooling and reference model (else a warning, and it is rebuilt)."""
        if self._fpo_cache_checked:
            return
        self._fpo_cache_checked = True
        path = self.fpo_cache_path
        if path is None or not os.path.isfile(path):
            return
        cache = ReferenceCache.load(path)
        try:
            if cache.meta.get("key") != "content":
                raise RuntimeError("it is not keyed by content")
            cache.check_compatible(
                layer=self.fpo_layer, sae=self.sae, pool=self.fpo_pool, site="hook", model=model
            )
        except RuntimeError as e:
            warnings.warn(
                f"the reference cache {os.fspath(path)} does not match this run ({e}); "
                "rebuilding it",
                stacklevel=4,
            )
            return
        self.fpo_cache = cache

    @torch.no_grad()
    def _add_features(self, ds: Any, batch_size: int) -> None:
        model, adapter = self._reference()
        self._load_cache(model)
        have = set() if self.fpo_cache is None else set(self.fpo_cache._row)
        todo: list[int] = []
        keys: list[int] = []
        cols = {c: ds[c] for c in ("prompt_ids", "chosen_ids", "rejected_ids")}
        for i in range(len(ds)):
            key = content_key({c: v[i] for c, v in cols.items()})
            if key not in have:
                have.add(key)
                todo.append(i)
                keys.append(key)
        if not todo:
            return
        was = model.training
        model.eval()  # no dropout in the reference, as TRL's precompute
        dev = next(model.parameters()).device
        self.sae.to(dev)
        parts = _CacheParts()
        try:
            for s in range(0, len(todo), batch_size):
                rows = todo[s : s + batch_size]
                b = self.data_collator([ds[i] for i in rows])
                batch = {
                    "input_ids": b["input_ids"],
                    "attention_mask": b["attention_mask"],
                    "labels": b["input_ids"].masked_fill(b["completion_mask"] == 0, -100),
                }
                # the same autocast as the training forward; the SAE encodes in float32
                with adapter, self.accelerator.autocast():
                    out = preference_pass(
                        model, batch, sae=self.sae, layer=self.fpo_layer, pool=self.fpo_pool
                    )
                parts.add(out, torch.tensor(keys[s : s + len(rows)], dtype=torch.long))
        finally:
            model.train(was)
        meta = {
            "d_sae": self.sae.d_sae,
            "layer": self.fpo_layer,
            "pool": self.fpo_pool,
            "site": "hook",
            "sae": self.sae.identity(),
            "key": "content",
            "model_fingerprint": _model_fingerprint(model),
        }
        self.fpo_cache = _concat(self.fpo_cache, parts.build(meta))
        if self.fpo_cache_path is not None and self.accelerator.is_main_process:
            self.fpo_cache.save(self.fpo_cache_path)

    # -- the loss ------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        keys = inputs.pop(KEY, None)
        if keys is None:
            raise KeyError(
                f"the batch has no {KEY!r} entry: use FPOTrainer's default collator "
                "(or IndexedPreferenceCollator)"
            )
        if self.fpo_cache is None:
            raise RuntimeError("the FPO feature cache is empty: no dataset was precomputed")
        ids, att, comp = inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"]
        labels = ids.masked_fill(comp == 0, -100)
        with ResidualCapture(model, self.fpo_layer) as cap:
            out = model(
                input_ids=ids,
                attention_mask=att,
                labels=labels,
                fused_lm_head=True,
                use_cache=False,
            )
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
        mask = pool_positions(comp.bool(), self.fpo_pool)
        dev_type = h.device.type
        off = (
            torch.autocast(dev_type, enabled=False)
            if torch.is_autocast_enabled(dev_type)
            else contextlib.nullcontext()
        )
        with off:  # the SAE encodes in float32, as for the cached reference codes
            codes = pool_response_codes(sae.encode(h[mask].float()), mask, self.fpo_pool)
        cw, cl = codes.chunk(2)
        try:
            ref = self.fpo_cache.batch(keys.cpu(), h.device)
        except RuntimeError as e:
            raise RuntimeError(
                f"a pair of this batch has no cached reference features ({e}); "
                "pass its dataset as eval_dataset= or to evaluate(), which "
                "precompute them"
            ) from None
        o = fpo_loss(
            mw,
            ml,
            ref_w,
            ref_l,
            cw,
            cl,
            ref["ref_codes_w"],
            ref["ref_codes_l"],
            beta=self.beta,
            alpha=self.fpo_alpha,
            k=self.fpo_k,
            index_mode=self.fpo_index_mode,
            stop_grad_chosen=self.fpo_stop_grad_chosen,
        )
        g = self.accelerator.gather_for_metrics
        m = self._metrics[mode]
        m["rewards/chosen"].append(g(o.reward_w).mean().item())
        m["rewards/rejected"].append(g(o.reward_l).mean().item())
        m["rewards/accuracies"].append(g((o.reward_w > o.reward_l).float()).mean().item())
        m["rewards/margins"].append(g(o.reward_w - o.reward_l).mean().item())
        m["fpo/d_chosen"].append(g(o.d_w.detach()).mean().item())
        m["fpo/d_rejected"].append(g(o.d_l.detach()).mean().item())
        return (o.loss, out) if return_outputs else o.loss
