"""A stand-in for the payment provider's client library.

It declines every card, so the shop always has one failed job to look at. A real client would
also raise for timeouts and outages, which are worth retrying; a declined card is not.
"""

from __future__ import annotations

from decimal import Decimal


class PartnerError(Exception):
    """Anything the payment provider reports."""


class CardDeclined(PartnerError):
    """The provider refused the charge; trying again will not change its mind."""


def charge(amount: Decimal, *, idempotency_key: str) -> str:
    """Charge the order's card and return the provider's charge id."""
    raise CardDeclined("card declined by the issuer")
