"""`python -m remediation`: the remediation service."""

from remediation.cli import main

raise SystemExit(main())
