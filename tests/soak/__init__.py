"""The soak runner: seeded fault scenarios at scale against a real multi-process deployment
(issue 12, item 7; `make soak`, not part of `make test`).

It lives under `tests/` because it is a test of the whole system built on the fault harness
(`tests.faults.harness`: processes killed with SIGKILL, the fault-injecting leader-to-helper
proxy), and only tests may import from every layer: it drives the services as processes, the
SDK's `Device` as devices do, `deploy` to configure and provision, and reads the stores for its
checks. `bench` may not import `tests`, and nothing in `shared`, `client_sdk`, `services` or
`deploy` should carry fault-injection code. `runner` says what a scenario does and checks;
`deployment` what runs; `postgres` the throwaway database server it crashes.
"""
