"""The offline reference of FPO (paper §3, "Building Offline Reference Margin and Constraint").

Phase 1 runs the reference model once over the preference data and keeps, per pair, the
reference's summed and length-normalised log-probs of both responses (``A_ref``; the margin
``γ_ref-LN = β(A_ref(y_w) - A_ref(y_l))`` is formed at training time so β can change) and the
pooled SAE codes ``c̄_ref`` of both responses. Pooled JumpReLU/TopK codes are sparse, so the
cache keeps every non-zero entry (int32 index + float32 value, CSR rows): exact. ``cache_topk``
keeps only the top-k entries per response, the paper's O(2·N·k) storage, after which entries
outside the kept set read as 0 (docs/fpo.md, "Decisions").

Each pair carries a fingerprint of its token ids; :meth:`ReferenceCache.batch` refuses a batch
whose ids differ from the cached ones (other tokenizer, lengths, edited data), and loading
checks the layer, SAE, site and pooling the cache was built with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from icml25._validate import as_int
from icml25.fpo.data import PreferenceCollator
from icml25.fpo.forward import preference_pass
from icml25.fpo.sae import SparseAutoencoder

__all__ = ["ReferenceCache", "build_reference_cache"]

_VERSION = 1


def _model_fingerprint(model: nn.Module) -> str:
    from icml25.llm.hf import weights_fingerprint

    return weights_fingerprint(model)


def _to_csr(dense: Tensor, topk: int | None) -> tuple[list[Tensor], list[Tensor]]:
    idx, val = [], []
    for row in dense:
        nz = row.nonzero().squeeze(-1)
        v = row[nz]
        if topk is not None and len(nz) > topk:
            keep = v.topk(topk).indices
            nz, v = nz[keep], v[keep]
        idx.append(nz.to(torch.int32).cpu())
        val.append(v.float().cpu())
    return idx, val


class _CacheParts:
    """The reference quantities of the batches seen so far; :meth:`build` makes the cache. Shared
    by :func:`build_reference_cache` and the TRL trainer's feature cache."""

    def __init__(self, cache_topk: int | None = None) -> None:
        self.cache_topk = cache_topk
        self.cols: dict[str, list[Tensor]] = {
            k: [] for k in ("index", "sum_w", "sum_l", "mean_w", "mean_l", "len_w", "len_l")
        }
        self.csr: dict[str, tuple[list, list]] = {"w": ([], []), "l": ([], [])}

    def add(self, out: Any, index: Tensor) -> None:
        """One batch's :class:`~icml25.fpo.forward.PassOutput` (rows: chosen, then rejected)."""
        for name, attr in (("sum", "sum"), ("mean", "mean"), ("len", "length")):
            w, lo = out.halves(attr)
            self.cols[f"{name}_w"].append(w.float().cpu() if name != "len" else w.cpu())
            self.cols[f"{name}_l"].append(lo.float().cpu() if name != "len" else lo.cpu())
        self.cols["index"].append(torch.as_tensor(index).cpu())
        if out.codes is not None:
            for side, c in zip("wl", out.halves("codes")):
                i_, v_ = _to_csr(c, self.cache_topk)
                self.csr[side][0].extend(i_)
                self.csr[side][1].extend(v_)

    def build(self, meta: dict[str, Any]) -> ReferenceCache:
        tensors = {k: torch.cat(v) for k, v in self.cols.items()}
        if len(set(tensors["index"].tolist())) != len(tensors["index"]):
            raise ValueError("the records' idx values are not unique")
        for side, (idx, val) in self.csr.items():
            if not idx:
                continue
            tensors[f"codes_{side}_offsets"] = torch.tensor([0] + [len(x) for x in idx]).cumsum(0)
            tensors[f"codes_{side}_indices"] = torch.cat(idx)
            tensors[f"codes_{side}_values"] = torch.cat(val)
        return ReferenceCache(tensors, json.loads(json.dumps(meta)))


class ReferenceCache:
    """Cached reference quantities for ``N`` pairs, looked up by the pair's index (the record's
    ``idx`` field, else its position in the dataset).

    Tensors: ``sum_w``, ``sum_l``, ``mean_w``, ``mean_l`` ``(N,)`` float32, ``len_w``, ``len_l``
    ``(N,)``; sparse codes per side (``codes_w`` / ``codes_l``) as CSR ``offsets`` ``(N+1,)``,
    ``indices`` int32, ``values`` float32; ``meta``: ``d_sae``, layer, pool, site, SAE and
    collator identity, fingerprints.
    """

    def __init__(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        need = ("index", "sum_w", "sum_l", "mean_w", "mean_l", "len_w", "len_l")
        missing = [k for k in need if k not in tensors]
        if missing:
            raise ValueError(f"a reference cache needs tensors {missing}")
        self.tensors, self.meta = tensors, meta
        self.d_sae = meta.get("d_sae")
        self._row = {int(i): r for r, i in enumerate(tensors["index"].tolist())}
        self.fingerprints: list[str] = list(meta.get("fingerprints", []))

    def __len__(self) -> int:
        return len(self._row)

    @property
    def has_codes(self) -> bool:
        return "codes_w_offsets" in self.tensors

    def _rows(self, indices: Sequence[int] | Tensor) -> list[int]:
        idx = indices.tolist() if isinstance(indices, Tensor) else list(indices)
        rows = []
        for i in idx:
            i = as_int("pair index", i)  # numpy integers too
            if i not in self._row:
                raise RuntimeError(
                    f"pair index {i} is not in the reference cache ({len(self)} "
                    "pairs): it was built on other data; rebuild it"
                )
            rows.append(self._row[i])
        return rows

    def verify(self, indices: Sequence[int] | Tensor, fingerprints: Sequence[str]) -> None:
        """Raise ``RuntimeError`` naming the first pair whose token ids differ from the cache's."""
        if not self.fingerprints:
            return
        for i, r, fp in zip(
            list(indices.tolist() if isinstance(indices, Tensor) else indices),
            self._rows(indices),
            fingerprints,
        ):
            if self.fingerprints[r] != fp:
                raise RuntimeError(
                    f"reference cache mismatch at pair index {i}: its token ids differ from "
                    "those the cache was built from (different tokenizer, max_length, chat "
                    "template or edited data); rebuild the cache"
                )

    def dense_codes(self, side: str, rows: list[int], device: Any = None) -> Tensor:
        """``(len(rows), d_sae)`` dense float32 codes of one side (``"w"`` or ``"l"``)."""
        off = self.tensors[f"codes_{side}_offsets"]
        ind = self.tensors[f"codes_{side}_indices"]
        val = self.tensors[f"codes_{side}_values"]
        r = torch.as_tensor(rows, dtype=torch.long)
        starts, lens = off[r], off[r + 1] - off[r]
        total = int(lens.sum())
        # the flat positions of every kept entry of the selected rows, in row order
        shift = torch.repeat_interleave(starts - (lens.cumsum(0) - lens), lens)
        pos = shift + torch.arange(total)
        which = torch.repeat_interleave(torch.arange(len(rows)), lens)
        out = torch.zeros(len(rows), int(self.d_sae))
        out[which, ind[pos].long()] = val[pos]
        return out.to(device) if device is not None else out

    def batch(
        self,
        indices: Sequence[int] | Tensor,
        device: Any = None,
        *,
        fingerprints: Sequence[str] | None = None,
    ) -> dict[str, Tensor]:
        """``ref_mean_w``, ``ref_mean_l``, ``ref_sum_w``, ``ref_sum_l`` ``(B,)`` and, when codes
        were cached, dense ``ref_codes_w``, ``ref_codes_l`` ``(B, m)``, on ``device``."""
        rows = self._rows(indices)
        if fingerprints is not None:
            self.verify(indices, fingerprints)
        r = torch.tensor(rows, dtype=torch.long)
        out = {
            f"ref_{k}": self.tensors[k][r].to(device) if device is not None else self.tensors[k][r]
            for k in ("mean_w", "mean_l", "sum_w", "sum_l")
        }
        if self.has_codes:
            out["ref_codes_w"] = self.dense_codes("w", rows, device)
            out["ref_codes_l"] = self.dense_codes("l", rows, device)
        return out

    def check_compatible(
        self,
        *,
        layer: int | None = None,
        sae: SparseAutoencoder | None = None,
        pool: str | None = None,
        site: str | None = None,
        model: nn.Module | None = None,
    ) -> None:
        """Raise ``RuntimeError`` when the cache was built with another layer, SAE, pooling,
        site or reference model (a fingerprint of its weights) than the run uses."""
        want = {
            "layer": layer,
            "pool": pool,
            "site": site,
            "sae": sae.identity() if sae is not None else None,
            "model_fingerprint": _model_fingerprint(model) if model is not None else None,
        }
        for k, v in want.items():
            if v is None or self.meta.get(k) is None:
                continue
            if json.loads(json.dumps(v)) != self.meta[k]:
                raise RuntimeError(
                    f"the reference cache was built with {k}={self.meta[k]!r}, "
                    f"but training uses {k}={v!r}; rebuild the cache"
                )

    def save(self, path: str | os.PathLike) -> None:
        """Write ``path`` (safetensors: the flat tensors, the metadata as a JSON string)."""
        from safetensors.torch import save_file

        meta = {"fpo_cache": json.dumps({**self.meta, "version": _VERSION})}
        tmp = f"{os.fspath(path)}.tmp"
        save_file({k: v.contiguous() for k, v in self.tensors.items()}, tmp, metadata=meta)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ReferenceCache:
        from safetensors import safe_open

        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no reference cache at {path!r}")
        with safe_open(path, framework="pt") as f:
            md = f.metadata() or {}
            if "fpo_cache" not in md:
                raise ValueError(f"{path} is a safetensors file but not an FPO reference cache")
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = json.loads(md["fpo_cache"])
        if meta.get("version") != _VERSION:
            raise ValueError(f"{path}: cache version {meta.get('version')} is not {_VERSION}")
        return cls(tensors, meta)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@torch.no_grad()
def build_reference_cache(
    ref_model: nn.Module,
    sae: SparseAutoencoder | None,
    dataset: Any,
    *,
    layer: int | None,
    collator: PreferenceCollator,
    batch_size: int = 8,
    pool: str = "mean",
    site: str = "hook",
    cache_topk: int | None = None,
    device: Any = None,
    progress: bool | None = None,
) -> ReferenceCache:
    """Run ``ref_model`` once over ``dataset`` (records with ``prompt``/``chosen``/``rejected``,
    a list or a ``datasets.Dataset``) and cache what FPO needs from it (see the module doc).

    ``sae=None`` caches the log-probs only (DPO/TDPO's precomputed reference, as TRL's
    ``precompute_ref_log_probs``). ``device`` runs the model there (default: where it is); the
    cache lives on CPU. The model is put in eval mode and restored.
    """
    from icml25.progress import track

    if not isinstance(collator, PreferenceCollator):
        raise TypeError(f"collator must be a PreferenceCollator, got {type(collator).__name__}")
    batch_size = as_int("batch_size", batch_size, 1)
    if cache_topk is not None:  # None keeps every non-zero
        cache_topk = as_int("cache_topk", cache_topk, 1)
    if sae is not None and layer is None:
        raise ValueError("an SAE needs the layer it reads (layer=...)")
    if layer is not None:
        from icml25.fpo.hooks import resolve_layer

        layer = resolve_layer(ref_model, layer)
    from icml25.fpo.data import as_records

    dataset = as_records(dataset)
    n = len(dataset)
    if n == 0:
        raise ValueError("the dataset is empty")
    if device is not None:
        ref_model = ref_model.to(device)
    was = ref_model.training
    ref_model.eval()
    parts = _CacheParts(cache_topk)
    fps: list[str] = []
    starts = range(0, n, batch_size)
    try:
        for s in track(
            starts,
            "FPO reference cache",
            total=len(starts),
            disable=None if progress is None else not progress,
        ):
            recs = []
            for i in range(s, min(n, s + batch_size)):
                r = dict(dataset[i])
                r.setdefault("idx", i)
                recs.append(r)
            b = collator(recs)
            out = preference_pass(ref_model, b, sae=sae, layer=layer, pool=pool, site=site)
            parts.add(out, b["index"])
            fps += b["fingerprint"]
    finally:
        ref_model.train(was)
    meta = {
        "d_sae": sae.d_sae if sae is not None else None,
        "layer": layer,
        "pool": pool,
        "site": site,
        "sae": sae.identity() if sae is not None else None,
        "collator": collator.identity,
        "cache_topk": cache_topk,
        "model": getattr(getattr(ref_model, "config", None), "_name_or_path", "")
        or type(ref_model).__name__,
        "model_fingerprint": _model_fingerprint(ref_model),
        "fingerprints": fps,
    }
    return parts.build(meta)
