"""The base of every error the device SDK raises (one error type per layer).

A device refuses or fails for a reason it can name: an untrusted recipe, an exhausted privacy
budget, no data for the query, no token, no usable HPKE suite, a refused upload. Each is a
`ClientError` subclass; the simulator records them per device, and the CLI prints any as one
line (`deploy.cli`).
"""

from __future__ import annotations


class ClientError(Exception):
    """The device cannot (or must not) answer; the message says why, never a secret."""
