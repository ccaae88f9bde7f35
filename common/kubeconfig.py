"""The Kubernetes client configuration every gpuwarden process builds the same way: the pod's
service account when in a cluster, else ``$KUBECONFIG`` as it is now (the official client reads
that variable once, when first imported, so a later change would be missed), else
``~/.kube/config``. Raises the client's ``ConfigException`` when there is none."""

from __future__ import annotations

import os
from typing import Any


def client_configuration() -> Any:
    """A ``kubernetes.client.Configuration`` loaded from the cluster or the kubeconfig."""
    import kubernetes

    cfg = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=cfg)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg
        )
    return cfg
