"""The device SDK: a device's side of sagg (000 §4, 001 §4.1, §4.8, appendix A).

`client_sdk.device.Device` ties the modules together: `events` (on-device data), `policy`
(query classes and budgets shipped with the OS), `recipes` (fetch and verify), `budget` (the
accountant of 000 §4.3), `sampling` (Poisson self-sampling, donation time), `query`
(selection, encoding, randomization), `tokens` (Privacy Pass), `reports` (Prio3 + HPKE),
`upload`, `audit`; `simulator` and `cli` drive many devices.
"""

from client_sdk.device import Device, DeviceConfig, Outcome

__all__ = ["Device", "DeviceConfig", "Outcome"]
