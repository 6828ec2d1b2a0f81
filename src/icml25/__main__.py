"""``python -m icml25``: the command line."""

from icml25.cli import main

if __name__ == "__main__":  # importing the module (e.g. by a documentation tool) runs nothing
    raise SystemExit(main())
