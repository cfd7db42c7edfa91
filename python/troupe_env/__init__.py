"""troupe_env: troupe's environment server from Python.

The protocol client (Client, Session) uses the standard library only. The
PettingZoo environments are in troupe_env.pettingzoo (they need pettingzoo,
gymnasium and numpy). Importable from a checkout: put python/ on PYTHONPATH.
"""

from .client import Client, ServerError, Session

__all__ = ["Client", "ServerError", "Session"]
