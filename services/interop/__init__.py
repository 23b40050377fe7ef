"""The DAP interop test API (draft-dcook-ppm-dap-interop-test-design-07, digest §11).

Three roles, each one process serving ``POST /internal/test/*`` on its own port:
- `services.interop.aggregator`: the real aggregator app mounted under ``/dap/`` (interop
  draft §4.4), provisioned through ``add_task``;
- `services.interop.collector`: the real collector app behind ``add_task``,
  ``collection_start`` and ``collection_poll`` (interop draft §4.5);
- `services.interop.client`: the DAP upload client behind ``upload`` (interop draft §4.3).

`services.interop.cli` is the command line (``sagg interop ROLE --port P``).
"""
