"""``dashboard``: serve the web dashboard (`sqla_queue.dashboard`) with uvicorn.

Read-only unless actions are enabled in one of two ways: ``SQLA_QUEUE_DASHBOARD_PASSWORD`` set
(actions need HTTP basic auth as ``admin`` with that password; the page's "Sign in" link asks
for it), or ``--allow-actions``, which lets every visitor act and is refused on any address but
the loopback one. ``--protect-reads`` makes pages ask for the password too. Requests for
any Host but the bound address and the loopback names (``--allowed-host`` adds more) are
refused: a web page elsewhere cannot read a loopback dashboard through DNS rebinding.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta

import click

from ._params import DURATION, DURATION_HELP
from .root import CliContext, main

PASSWORD_ENV = "SQLA_QUEUE_DASHBOARD_PASSWORD"
SECRET_ENV = "SQLA_QUEUE_DASHBOARD_SECRET"
INSTALL_HINT = "the dashboard needs its extra: pip install 'sqla-queue[dashboard]'"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--allow-actions", is_flag=True,
              help="Let every visitor retry, cancel, pause and resume (only with a loopback --host). "
                   f"Otherwise actions need ${PASSWORD_ENV} (HTTP basic auth, user admin).")
@click.option("--refresh", type=DURATION, default="10s", show_default=True,
              help=f"How often the live pages refresh. {DURATION_HELP}")
@click.option("--title", default="sqla_queue", show_default=True, help="Shown in the navigation bar.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Also answer requests for this Host (repeatable; '*' for any). Default: the --host "
                   "address, localhost, 127.0.0.1 and ::1; others are refused (DNS rebinding).")
@click.option("--protect-reads", is_flag=True,
              help=f"Pages need ${PASSWORD_ENV} too (HTTP basic auth, user admin), not only actions.")
@click.pass_obj
def dashboard(obj: CliContext, host: str, port: int, allow_actions: bool, refresh: timedelta, title: str,
              allowed_hosts: tuple[str, ...], protect_reads: bool) -> None:
    """Serve the web dashboard: queues, history plots, jobs, workers, doctor checks."""
    try:
        import uvicorn

        from ..dashboard import basic_auth, create_app
        from ..dashboard.security import LOOPBACK_HOSTS
    except ImportError:
        raise click.UsageError(INSTALL_HINT) from None
    password = os.environ.get(PASSWORD_ENV)
    if allow_actions and not is_loopback(host):
        raise click.UsageError(f"--allow-actions lets anyone act: only with a loopback --host; on {host} "
                               f"set ${PASSWORD_ENV} instead")
    if protect_reads and not password:
        raise click.UsageError(f"--protect-reads needs ${PASSWORD_ENV}: the password pages then ask for")
    auth = (lambda request: True) if allow_actions else basic_auth(password) if password else None
    hosts = None if "*" in allowed_hosts else (host, *LOOPBACK_HOSTS, *allowed_hosts)
    app = create_app(obj.queue(), auth=auth, title=title, refresh=refresh.total_seconds(),
                     secret_key=os.environ.get(SECRET_ENV), allowed_hosts=hosts,
                     read_auth=basic_auth(password) if protect_reads else None)
    mode = "actions allowed" if allow_actions else "actions need sign-in" if password else "read-only"
    click.echo(f"sqla-queue dashboard on http://{host}:{port}/ ({mode}); Ctrl-C stops it", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
