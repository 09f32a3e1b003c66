"""The load side: the one gevent process (or several, with workers) that sends the calls.

Transports (``client``), work turns and the poll clock (``turns``, ``hubclock``), the per-process
run state (``runtime``), the Locust users (``user``), the load shape (``shape``), the client's own
measurements (``selfwatch``), the composition of a run (``compose``), the headless ramp
(``ramp``) and the master/worker links (``distributed``, ``worker``). The only part that imports
gevent and locust; import it before anything opens a socket.
"""
