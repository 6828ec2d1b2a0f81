from icml25.cli import main

raise SystemExit(main())
