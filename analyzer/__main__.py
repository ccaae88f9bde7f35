"""``python -m analyzer``: the analyzer service (same as ``gpuwarden-analyzer``)."""

from analyzer.cli import main

raise SystemExit(main())
