"""What a run is asked to do: the options of a run and the flag table every front end is generated
from (``options``, ``flags``), and one call's content and target (``request``). No gevent here."""
