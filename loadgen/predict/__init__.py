"""``loadgen predict``: deployments' ramps on the simulator's virtual clock (``deploy``). A part of its
own: it drives the simulator's engine (``loadgen.sim``) and judges the rows as a report would
(``loadgen.analysis``); the simulator imports nothing of the load generator."""
