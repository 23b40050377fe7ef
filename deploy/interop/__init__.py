"""The DAP interop test API (draft-dcook-ppm-dap-interop-test-design-07, digest §11).

It lives in `deploy`, beside the launcher, because it composes the layers below in one process:
the aggregator and collector roles wrap the services' apps, the client role the SDK's upload
client.

Three roles, each one process serving ``POST /internal/test/*`` on its own port:
- `deploy.interop.aggregator`: the real aggregator app mounted under ``/dap/`` (interop
  draft §4.4), provisioned through ``add_task``;
- `deploy.interop.collector`: the real collector app behind ``add_task``,
  ``collection_start`` and ``collection_poll`` (interop draft §4.5);
- `deploy.interop.client`: the SDK's DAP upload client (`client_sdk.upload`) behind ``upload``
  (interop draft §4.3).

`deploy.interop.cli` is the command line (``sagg interop ROLE --port P``).
"""
