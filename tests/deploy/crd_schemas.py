"""Small JSON schemas for the Prometheus Operator kinds that kubernetes-validate does not know.

They follow the monitoring.coreos.com/v1 CRDs (prometheus-operator v0.7x) for the fields the
shipped manifests use, and reject unknown fields so that a typo cannot pass unnoticed.
"""

from __future__ import annotations

from typing import Any

# The operator's Duration pattern (pkg/apis/monitoring/v1 types.go).
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
    r"(([0-9]+)s)?(([0-9]+)ms)?)$",
}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
LABEL_NAME = {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required or [],
        "additionalProperties": False,
    }


METADATA = _obj(
    {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
    ["name"],
)
RELABEL = _obj(
    {
        "sourceLabels": {"type": "array", "items": LABEL_NAME},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
                "lowercase", "uppercase", "keepequal", "dropequal",
            ]
        },
    }
)  # fmt: skip
ENDPOINT = _obj(
    {
        "port": {"type": "string"},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https"]},
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": RELABEL},
        "metricRelabelings": {"type": "array", "items": RELABEL},
    },
    ["port"],
)
SERVICE_MONITOR = _obj(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": METADATA,
        "spec": _obj(
            {
                "jobLabel": {"type": "string"},
                "selector": _obj({"matchLabels": STRING_MAP}, ["matchLabels"]),
                "namespaceSelector": _obj(
                    {"any": {"type": "boolean"}, "matchNames": {"type": "array"}}
                ),
                "endpoints": {"type": "array", "minItems": 1, "items": ENDPOINT},
            },
            ["selector", "endpoints"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)
RULE = {
    "type": "object",
    "properties": {
        "record": {"type": "string", "pattern": "^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "alert": {"type": "string", "minLength": 1},
        "expr": {"type": ["string", "integer"]},
        "for": DURATION,
        "keep_firing_for": DURATION,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
    "required": ["expr"],
    "additionalProperties": False,
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
}
PROMETHEUS_RULE = _obj(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": METADATA,
        "spec": _obj(
            {
                "groups": {
                    "type": "array",
                    "items": _obj(
                        {
                            "name": {"type": "string", "minLength": 1},
                            "interval": DURATION,
                            "limit": {"type": "integer"},
                            "rules": {"type": "array", "items": RULE},
                        },
                        ["name", "rules"],
                    ),
                }
            },
            ["groups"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)
SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}

# monitoring.coreos.com/v1alpha1 AlertmanagerConfig, the fields the shipped one uses.
SECRET_KEY = _obj({"name": {"type": "string"}, "key": {"type": "string"}}, ["name", "key"])
ALERTMANAGER_CONFIG = _obj(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1alpha1"},
        "kind": {"const": "AlertmanagerConfig"},
        "metadata": METADATA,
        "spec": _obj(
            {
                "route": _obj(
                    {
                        "receiver": {"type": "string"},
                        "matchers": {
                            "type": "array",
                            "items": _obj(
                                {
                                    "name": {"type": "string"},
                                    "value": {"type": "string"},
                                    "matchType": {"enum": ["=", "!=", "=~", "!~"]},
                                },
                                ["name"],
                            ),
                        },
                        "groupBy": {"type": "array", "items": {"type": "string"}},
                        "groupWait": DURATION,
                        "groupInterval": DURATION,
                        "repeatInterval": DURATION,
                        "continue": {"type": "boolean"},
                    },
                    ["receiver"],
                ),
                "receivers": {
                    "type": "array",
                    "items": _obj(
                        {
                            "name": {"type": "string"},
                            "webhookConfigs": {
                                "type": "array",
                                "items": _obj(
                                    {
                                        "url": {"type": "string", "pattern": "^https?://"},
                                        "sendResolved": {"type": "boolean"},
                                        "maxAlerts": {"type": "integer"},
                                        "httpConfig": _obj(
                                            {
                                                "authorization": _obj(
                                                    {
                                                        "type": {"type": "string"},
                                                        "credentials": SECRET_KEY,
                                                    }
                                                ),
                                                "tlsConfig": {"type": "object"},
                                            }
                                        ),
                                    },
                                    ["url"],
                                ),
                            },
                        },
                        ["name"],
                    ),
                },
            },
            ["route", "receivers"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)
SCHEMAS["AlertmanagerConfig"] = ALERTMANAGER_CONFIG
