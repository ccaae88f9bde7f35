"""``python -m remediation.events``: the events relay alone, on a remediation journal.

For a site that runs delivery beside the service (a sidecar), and for the kill -9 tests:
the same Relay the service runs, with the same settings (flags > GPUWARDEN_EVENTS_* >
--config YAML). Run one relay per journal: the service's own (``--events-url`` on the
service) or this one, not both.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from common import settings as gsettings
from common.settings import SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    from remediation.cli import events_flags
    from remediation.settings import Settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m remediation.events", description=__doc__)
    p.add_argument("--config", help="YAML settings file (the service's)")
    p.add_argument("--state-db", help="the remediation journal (SQLite)")
    events_flags(p)
    args = vars(p.parse_args(sys.argv[1:] if argv is None else list(argv)))
    config = args.pop("config")
    try:
        s = gsettings.load(Settings, args, config_file=config)
        from remediation.events import config as events_config

        cfg = events_config.from_settings(s)
        if cfg is None:
            raise SettingsError("--events-url: required")
    except (SettingsError, ValueError) as e:
        print(f"python -m remediation.events: {e}", file=sys.stderr)
        return 2
    from remediation.events.capture import prime
    from remediation.events.relay import Relay
    from remediation.events.sink import HttpSink
    from remediation.journal import Journal

    journal = Journal(s.state_db, shared=s.elects)  # as the service opens it
    prime(journal)
    relay = Relay(journal, cfg, HttpSink(cfg.url, cfg.timeout_s, cfg.token))
    try:
        asyncio.run(relay.run())
    except KeyboardInterrupt:
        pass
    finally:
        journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
