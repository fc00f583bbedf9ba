"""Measurement, apart from what is measured: clocks and the L2 flush
(:mod:`~evaluator.measure.timing`), the stopping rules (:mod:`~evaluator.measure.stopping`), the
statistics (:mod:`~evaluator.measure.stats`), the GPU's clocks around each repeat
(:mod:`~evaluator.measure.clocks`) and where a stage's wall time went
(:mod:`~evaluator.measure.ledger`).
"""
