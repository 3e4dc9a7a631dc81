"""Payload values JSON has no type for (datetime, date, time, Decimal, UUID, Enum) are encoded
as documented text, stored, and read back by a handler; anything else is refused naming where
it sits. Handler results get the same encoding."""

from __future__ import annotations

import enum
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from uuid import UUID

import pytest

import sqla_queue as sq


class Plan(enum.Enum):
    GOLD = "gold"


class Size(enum.IntEnum):
    LARGE = 3


AT = datetime(2030, 1, 2, 9, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
ORDER = UUID("9f1c2b1e-3d5a-4c8e-9b7a-0c1d2e3f4a5b")


def test_encoded_values_round_trip_through_a_handler(queue, clean_jobs):
    seen = {}

    @queue.task(name="invoice")
    def invoice(payload, ctx):
        seen.update(payload)
        seen["back"] = (datetime.fromisoformat(payload["at"]), date.fromisoformat(payload["due"]),
                        time.fromisoformat(payload["cutoff"]), Decimal(payload["total"]), UUID(payload["order"]),
                        Plan(payload["plan"]), Size(payload["size"]))
        return {"charged": Decimal(payload["total"]) * 2, "at": AT}

    job_id = queue.enqueue("invoice", {"at": AT, "due": date(2030, 1, 31), "cutoff": time(17, 0),
                                       "total": Decimal("12.50"), "order": ORDER, "plan": Plan.GOLD,
                                       "size": Size.LARGE, "lines": [{"price": Decimal("0.10")}]})
    queue.worker(concurrency=1).run(until_empty=True)

    assert seen["at"] == "2030-01-02T09:30:15.123456+02:00"
    assert (seen["due"], seen["cutoff"], seen["total"]) == ("2030-01-31", "17:00:00", "12.50")
    assert (seen["order"], seen["plan"], seen["size"], seen["lines"]) == (str(ORDER), "gold", 3, [{"price": "0.10"}])
    assert seen["back"] == (AT, date(2030, 1, 31), time(17, 0), Decimal("12.50"), ORDER, Plan.GOLD, Size.LARGE)
    job = queue.get_job(job_id)
    assert job.status == sq.JobStatus.COMPLETED
    assert job.result == {"charged": "25.00", "at": "2030-01-02T09:30:15.123456+02:00"}


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"tags": {"a", "b"}}, r"payload\['tags'\] \(set\)"),
        ({"items": [1, {"blob": b"x"}]}, r"payload\['items'\]\[1\]\['blob'\] \(bytes\)"),
        ({"wait": timedelta(seconds=5)}, r"payload\['wait'\] \(timedelta\)"),
    ],
)
def test_a_value_with_no_encoding_is_refused_naming_its_key(queue, clean_jobs, count_jobs, payload, where):
    queue.task(name="invoice")(lambda payload, ctx: None)
    with pytest.raises(sq.PayloadError, match=where + " is not JSON-serializable"):
        queue.enqueue("invoice", payload)
    assert count_jobs() == 0


def test_json_value_is_the_encoding_the_queue_stores():
    assert [sq.json_value(v) for v in (AT, Decimal("1.10"), ORDER, Plan.GOLD)] == [
        AT.isoformat(), "1.10", str(ORDER), "gold"]
    with pytest.raises(TypeError, match="set"):
        sq.json_value({1})
