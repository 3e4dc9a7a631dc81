"""The fault-injection TCP proxy, now shipped with the chaos runner (its network faults use it)."""

from sqla_queue.testing.chaos.proxy import TcpProxy

__all__ = ["TcpProxy"]
