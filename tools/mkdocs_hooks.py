"""MkDocs hooks: the site's front page is the README (its table of papers linking each paper's
page and API reference), and one API reference page per package is generated from ``__all__``,
so the site has a single source for each."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
#: public classes defined only when an optional dependency imports (static analysis cannot see them)
CONDITIONAL = {"TWAHFTrainer", "WeightedRewardTrainer"}
SHARED = {
    "llm": "Chat and generation backends shared by the LLM papers",
    "report": "Pre-registered criteria, checks and the reproduction report",
    "toy": "Offline stand-ins: tiny tokenizers, LMs and data",
    "preference": "Sequence log-probabilities and the sigmoid-DPO loss",
    "lora": "LoRA layers for any nn.Module",
}


def _papers():
    import sys

    sys.path.insert(0, str(ROOT / "src"))
    from icml25 import registry

    return registry.PAPERS


def _front_page() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
    text = text.replace("](CONTRIBUTING.md)", "](contributing.md)")

    def row(m: re.Match) -> str:
        num, title, module, rest = m.group(1), m.group(2), m.group(3), m.group(4)
        slug = module.split(".")[1]
        page = f"[{title}]({slug}.md)" if (ROOT / "docs" / f"{slug}.md").is_file() else title
        return f"| {num} | {page} | [`{module}`](api/{slug}.md) |{rest}"

    return re.sub(r"^\| (\d\d) \| (.+?) \| `(icml25\.\w+)` \|(.*)$", row, text, flags=re.M)


def _hidden_names(module: str) -> list[str]:
    """Public names the package-level page cannot show: loaded lazily on first use (optional
    dependencies), or shadowed by a submodule of the same name."""
    import importlib
    import inspect
    import pkgutil

    mod = importlib.import_module(module)
    subs = {m.name for m in pkgutil.iter_modules(getattr(mod, "__path__", []))}
    out = []
    for name in getattr(mod, "__all__", []):
        if name in vars(mod) and name not in subs and name not in CONDITIONAL:
            continue
        try:
            obj = getattr(mod, name)
        except Exception:  # an optional dependency is missing: nothing to document here
            continue
        if inspect.ismodule(obj):  # a public submodule (e.g. icml25.contrastive.theory)
            out.append(obj.__name__)
        elif callable(obj) and getattr(obj, "__module__", None):
            out.append(f"{obj.__module__}.{obj.__qualname__}")
    return out


def _api_page(module: str, title: str) -> str:
    import importlib

    names = [n for n in getattr(importlib.import_module(module), "__all__", [])]
    hidden = _hidden_names(module)
    shown = [n for n in names if not any(h.endswith("." + n) for h in hidden)]
    members = "".join(f"        - {n}\n" for n in shown)
    text = (
        f"# `{module}`\n\n{title}{'' if title.endswith(('.', '?', '!')) else '.'}\n\n"
        f"::: {module}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      members_order: source\n" + (f"      members:\n{members}" if members else "")
    )
    for path in hidden:  # imported to be found: they exist once an optional dependency loads
        text += (
            f"\n::: {path}\n    options:\n      show_root_heading: true\n"
            "      force_inspection: true\n"
        )
    subs = _submodules(module)
    if subs:
        text += (
            "\n## Submodules\n\nThe building blocks the package's entry points are made of, "
            "public in the module that defines them.\n"
        )
    for sub, sub_names in subs:
        members = "".join(f"        - {n}\n" for n in sub_names)
        text += (
            f"\n### `{sub}`\n\n::: {sub}\n    options:\n      show_root_heading: false\n"
            f"      members_order: source\n      members:\n{members}"
        )
    return text


#: a paper package's modules that are its command line and reproduction, not a library to call
NOT_API = {"repro", "cli", "figures", "experiment", "__main__"}


def _submodules(module: str) -> list[tuple[str, list[str]]]:
    """Each public submodule with the names of its ``__all__`` the package does not export."""
    import importlib
    import pkgutil

    mod = importlib.import_module(module)
    top = set(getattr(mod, "__all__", []))
    out = []
    for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        if info.name.startswith("_") or info.name in NOT_API:
            continue
        sub = importlib.import_module(f"{module}.{info.name}")
        names = [n for n in getattr(sub, "__all__", []) if n not in top and _defined_in(sub, n)]
        if names:
            out.append((sub.__name__, names))
    return out


def _defined_in(module, name: str) -> bool:
    """``name`` is made in ``module``, not imported into it from another."""
    import ast
    import inspect

    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__ == module.__name__
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def on_files(files, config):
    def add(uri: str, content: str) -> None:
        files.append(File.generated(config, uri, content=content))

    add("index.md", _front_page())
    add("changelog.md", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    add("contributing.md", (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    for p in _papers():
        add(f"api/{p.slug}.md", _api_page(p.module, f"Paper {p.number:02d}: {p.title}"))
    for name, what in SHARED.items():
        add(f"api/{name}.md", _api_page(f"icml25.{name}", what))
    return files


_ROLE = re.compile(r":(?:func|class|meth|data|attr|mod|exc|obj):(?=<code>)")


def on_page_content(html, page, config, files):
    """Docstrings use Sphinx roles (``:func:`name```), which mkdocstrings leaves as text: keep
    the code, drop the role prefix."""
    return _ROLE.sub("", html)
