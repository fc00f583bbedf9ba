"""Stand-ins for the modules the contest places beside a submission (``task``, ``utils``).

Unmodified contest submissions do ``from task import input_t, output_t`` and sometimes
``from utils import ...``; :func:`evaluator.contestant.contest_modules` maps those names to the
modules here (``reference`` is this project's own ``reference`` package) while a submission loads.
"""
