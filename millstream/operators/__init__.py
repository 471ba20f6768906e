"""The engine of the high-level API: one task's instance of an application's operators.

``graph`` holds the operator implementations and how watermarks and end-of-stream move through them;
``windows`` the window operator; ``state`` the state interface operators keep their state behind;
``graph_task`` the ``OperatorGraphTask`` — the StreamTask every high-level job runs — which reads
sources and intermediate streams, reconciles control messages and persists the task's state.
"""
