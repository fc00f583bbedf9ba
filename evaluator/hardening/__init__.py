"""The trust boundary, in one place: what a hardened run does so that a kernel cannot decide its
own verdict or time (docs/hardening.md).

- :mod:`~evaluator.hardening.guards`: the named rules the parent judges (fresh inputs, device
  drain, stream join, output rules, parent clock, physical floor) and :class:`Hardening`, which
  says which are on.
- :mod:`~evaluator.hardening.precheck`: the contest service's submission gates, run before anything.
- :mod:`~evaluator.hardening.channel`: the signed result channel a worker reports through.
- :mod:`~evaluator.hardening.sandbox` and :mod:`~evaluator.hardening.containment`: the worker's
  process, file and audit-hook containment, composed per stage.
"""
