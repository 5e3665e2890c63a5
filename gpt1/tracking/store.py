"""The tracking store: which URI, whether it answers, and a client with bounded retries.

The URI is params.tracking.uri, else $MLFLOW_TRACKING_URI, else sqlite:///<repo>/mlflow.db.
`check_store` runs before a stage does any work: a URI that is malformed or a store that does
not answer within a few seconds is one Gpt1Error naming the URI and where it came from. HTTP
requests retry a few times with a short backoff, so an outage costs seconds, not minutes.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpt1.config import TRACKING_STORE_URI, Params
from gpt1.errors import Gpt1Error
from gpt1.repo import repo_root

if TYPE_CHECKING:
    from mlflow import MlflowClient

URI_ENV = "MLFLOW_TRACKING_URI"
URI_KEY = "tracking.uri"
CHECK_SECONDS = 3.0
"""How long `check_store` waits for a server to accept a connection."""
# MLflow's HTTP client, bounded: 3 retries with 1-2-4 s backoff and 20 s per request.
HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
_DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306}


def uri_source(params: Params) -> str:
    """Where the tracking URI comes from: the params key, else the environment variable."""
    return URI_KEY if params.tracking.uri else URI_ENV


def tracking_uri(params: Params) -> str:
    """params.tracking.uri, else $MLFLOW_TRACKING_URI, else sqlite:///<repo>/mlflow.db.

    Always absolute for sqlite: MLflow's own default depends on the cwd and falls back to the
    deprecated file store when ./mlruns exists.
    """
    uri = params.tracking.uri or os.environ.get(URI_ENV)
    if not uri:
        return f"sqlite:///{repo_root() / 'mlflow.db'}"
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return f"{prefix}{repo_root() / uri[len(prefix):]}"
    if not TRACKING_STORE_URI.match(uri):
        raise Gpt1Error(
            f"tracking URI {uri!r} is not a database or server URI; use sqlite:///... or "
            "http://host:port (MLflow's file store is deprecated)", uri_source(params))
    return uri


def check_store(params: Params) -> None:
    """Refuse to start when the tracking store cannot be used (no-op when tracking is off):
    a sqlite database needs an existing folder, a server must accept a connection within
    CHECK_SECONDS."""
    if not params.tracking.enabled:
        return
    uri = tracking_uri(params)
    check_uri(uri, f"tracking URI {uri!r} (from {uri_source(params)})")


def check_uri(uri: str, where: str, existing: bool = False,
              remedy: str = "start it, or set tracking.enabled: false") -> None:
    """Gpt1Error (its line starting with `where`, ending with `remedy` when the server does not
    answer) unless the store at `uri` can be used: a sqlite database's folder exists
    (`existing`: the database itself, for reading, so that none is created), a server accepts
    a connection within CHECK_SECONDS."""
    if uri.startswith("sqlite:"):
        db = Path(uri.split(":///", 1)[-1])
        if existing and not db.is_file():
            raise Gpt1Error(f"{where}: no such store ({db} does not exist; nothing was "
                            f"logged there); set {URI_ENV} to the store that holds it")
        if not db.parent.is_dir():
            raise Gpt1Error(f"{where}: folder {db.parent} does not exist")
        return
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+")[0]
    try:
        host, port = parts.hostname, parts.port or _DEFAULT_PORTS[scheme]
    except (ValueError, KeyError):
        raise Gpt1Error(f"{where}: malformed (no valid host:port)") from None
    if not host:
        raise Gpt1Error(f"{where}: malformed (no host)")
    try:
        with socket.create_connection((host, port), timeout=CHECK_SECONDS):
            pass
    except OSError as err:
        raise Gpt1Error(f"{where}: tracking store unreachable ({err.strerror or err}); "
                        f"{remedy}") from None


def bound_http_retries() -> None:
    """MLflow's HTTP retry settings, bounded unless the user set them."""
    for key, value in HTTP_BOUNDS.items():
        os.environ.setdefault(key, value)


def client_for(uri: str) -> MlflowClient:
    """An MLflow client of the store at `uri`, with bounded HTTP retries."""
    from mlflow import MlflowClient

    bound_http_retries()
    return MlflowClient(tracking_uri=uri)


def client(params: Params) -> MlflowClient:
    """The client of params' tracking store."""
    return client_for(tracking_uri(params))
