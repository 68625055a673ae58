"""The emulator through the real SDKs, built with `_strict_response_validation=True` so a wrong field shape fails.

Lifecycles are stepped by advancing the emulator's clock, so nothing here sleeps on batch durations.
"""

import json
import math
import re
import time

import anthropic
import httpx2 as httpx
import openai
import pytest
from anthropic.types.messages import MessageBatch
from openai.types import Batch

from nspec.runners.emulator import Emulator, EmulatorConfig
from nspec.runners.emulator.config import Degrade, Faults, Limits, RateLimits, Responder, Timing
from nspec.runners.emulator.state import Clock

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class StillClock(Clock):
    """The emulator's time, moving only when a test advances it: a stepped lifecycle is where the test puts it,
    however slowly the machine runs the requests in between."""

    def __init__(self) -> None:
        super().__init__()
        self.start = time.time()

    def now(self) -> float:
        return self.start + self.offset


def stepped(state_dir: str | None = None, **sections: object) -> Emulator:
    """An emulator on the stepped lifecycle and a still clock, started."""
    emu = Emulator(EmulatorConfig(**{"timing": STEPPED, **sections}), state_dir=state_dir)  # type: ignore[arg-type]
    emu.emulation.clock = StillClock()
    return emu.start()


# Slow, fixed durations: the tests move the clock themselves, and a poll shows all the clock has reached.
STEPPED = Timing(
    validate_seconds=10,
    seconds_per_request=1,
    finalize_seconds=10,
    cancel_seconds=5,
    completion_window_seconds=24 * 3600,
    look_seconds=None,
)


@pytest.fixture
def make_emulator():
    running = []

    def start(state_dir: str | None = None, **sections) -> Emulator:
        emu = stepped(state_dir, **sections)
        running.append(emu)
        return emu

    yield start
    for emu in running:
        emu.stop()


def oai(emu, **kwargs):
    return openai.OpenAI(
        api_key="test-key", base_url=emu.openai_base_url, max_retries=0, _strict_response_validation=True, **kwargs
    )


def ant(emu, **kwargs):
    return anthropic.Anthropic(
        api_key="test-key", base_url=emu.anthropic_base_url, max_retries=0, _strict_response_validation=True, **kwargs
    )


def needle_prompt(i: int) -> str:
    return (
        f"It was a fine morning. The special magic code of crate {i} is: {1000000 + i}. Nothing more happened."
        f"\n\nWhat is the special magic code of crate {i}?"
    )


def openai_lines(n: int, model: str = "gpt-4.1-mini") -> bytes:
    return "".join(
        json.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": model,
                    "messages": [{"role": "user", "content": needle_prompt(i)}],
                    "max_completion_tokens": 50,
                },
            }
        )
        + "\n"
        for i in range(n)
    ).encode()


def anthropic_requests(n: int) -> list[dict]:
    return [
        {
            "custom_id": f"req-{i}",
            "params": {
                "model": "claude-haiku-4-5",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": needle_prompt(i)}],
            },
        }
        for i in range(n)
    ]


def submit_openai(client, n: int = 4, data: bytes | None = None, **kwargs) -> Batch:
    upload = client.files.create(file=("input.jsonl", data or openai_lines(n)), purpose="batch")
    return client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h", **kwargs
    )


def read_jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


# -- OpenAI: files ------------------------------------------------------------------------------------------------


def test_openai_file_routes(make_emulator):
    client = oai(make_emulator())
    data = openai_lines(3)
    created = client.files.create(file=("input.jsonl", data), purpose="batch")
    assert created.id.startswith("file-") and created.bytes == len(data) and created.purpose == "batch"
    assert client.files.retrieve(created.id) == created
    assert client.files.content(created.id).content == data
    deleted = client.files.delete(created.id)
    assert deleted.deleted and deleted.id == created.id
    with pytest.raises(openai.NotFoundError) as info:
        client.files.retrieve(created.id)
    assert info.value.body["message"] == f"No such File object: {created.id}"


def test_openai_upload_needs_purpose_batch(make_emulator):
    client = oai(make_emulator())
    with pytest.raises(openai.BadRequestError, match="Invalid purpose"):
        client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")


def test_openai_auth_required(make_emulator):
    emu = make_emulator()
    response = httpx.get(f"{emu.openai_base_url}/batches")
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "message": "You didn't provide an API key.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


def test_a_path_that_is_no_route_is_answered_in_the_words_of_the_api_it_belongs_to(make_emulator):
    emu = make_emulator()

    def openai_shape(message: str) -> dict:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}

    expected = {
        ("GET", "/v1/nope"): openai_shape,
        ("PUT", "/v1/files"): openai_shape,  # a route, not of this method
        ("GET", "/groq/openai/v1/nope"): openai_shape,
        ("GET", "/together/v1/nope"): openai_shape,
        ("GET", "/azure/nope"): lambda message: {"error": {"code": "404", "message": message}},
        ("GET", "/v1/messages/nope"): lambda message: {
            "type": "error",
            "error": {"type": "not_found_error", "message": message},
        },
        ("GET", "/google/v1beta/nope"): lambda message: {
            "error": {"code": 404, "message": message, "status": "NOT_FOUND"}
        },
        ("GET", "/mistral/v1/nope"): lambda message: {
            "object": "error",
            "message": message,
            "type": "not_found",
            "param": None,
            "code": None,
        },
    }
    for (method, path), body in expected.items():
        response = httpx.request(method, emu.anthropic_base_url + path)
        said = response.json()
        said.pop("request_id", None)  # Anthropic's, a new one each time
        assert response.status_code == 404 and said == body(f"Unknown route {method} {path}"), path


def test_openai_wrong_key_when_one_is_required(make_emulator):
    client = oai(make_emulator(api_key="right"))
    with pytest.raises(openai.AuthenticationError):
        client.batches.list()


# -- OpenAI: batch lifecycle --------------------------------------------------------------------------------------


def test_openai_batch_lifecycle(make_emulator):
    emu = make_emulator()
    client = oai(emu)
    batch = submit_openai(client, 4, metadata={"run_id": "abc123", "shard": "s1"})
    assert batch.status == "validating" and batch.metadata == {"run_id": "abc123", "shard": "s1"}
    emu.clock.advance(10.5)  # validated; the first request is done
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "in_progress" and batch.request_counts.total == 4
    assert batch.request_counts.completed == 0
    emu.clock.advance(2)
    moving = client.batches.retrieve(batch.id)
    assert moving.status == "in_progress" and moving.request_counts.completed == 2
    emu.clock.advance(2)
    assert client.batches.retrieve(batch.id).status == "finalizing"
    emu.clock.advance(10)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.request_counts.completed == 4 and done.request_counts.failed == 0
    assert done.in_progress_at <= done.finalizing_at <= done.completed_at
    assert done.error_file_id is None and done.usage.input_tokens > 0
    lines = read_jsonl(client.files.content(done.output_file_id).text)
    assert sorted(line["custom_id"] for line in lines) == [f"req-{i}" for i in range(4)]
    for line in lines:
        i = int(line["custom_id"].split("-")[1])
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert str(1000000 + i) in line["response"]["body"]["choices"][0]["message"]["content"]


def test_openai_output_lines_are_shuffled(make_emulator):
    emu = make_emulator()
    client = oai(emu)
    batch = submit_openai(client, 30)
    emu.clock.advance(100)
    lines = read_jsonl(client.files.content(client.batches.retrieve(batch.id).output_file_id).text)
    order = [line["custom_id"] for line in lines]
    assert sorted(order) == sorted(f"req-{i}" for i in range(30)) and order != [f"req-{i}" for i in range(30)]


def test_openai_raw_objects_match_the_sdk_types(make_emulator):
    emu = make_emulator()
    client = oai(emu)
    batch = submit_openai(client, 2)
    emu.clock.advance(100)
    client.batches.retrieve(batch.id)
    raw = httpx.get(f"{emu.openai_base_url}/batches/{batch.id}", headers={"Authorization": "Bearer k"}).json()
    Batch.model_validate(raw, strict=True)
    assert raw["object"] == "batch" and raw["status"] == "completed"
    for name in ("created_at", "in_progress_at", "finalizing_at", "completed_at", "expires_at"):
        assert type(raw[name]) is int  # Unix seconds
    for name in ("failed_at", "expired_at", "cancelling_at", "cancelled_at", "error_file_id"):
        assert raw[name] is None


@pytest.mark.parametrize(
    "lines, code, line_no",
    [
        (
            b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", '
            b'"body": {"model": "m", "messages": []}}'
            b"\nnot json\n",
            "invalid_json_line",
            2,
        ),
        (openai_lines(2).replace(b"req-1", b"req-0"), "duplicate_custom_id", 2),
        (openai_lines(1).replace(b'"POST"', b'"GET"'), "invalid_method", 1),
        (openai_lines(1).replace(b'"/v1/chat/completions"', b'"/v1/embeddings"'), "invalid_url", 1),
        (openai_lines(1) + openai_lines(1, "gpt-4o").replace(b"req-0", b"other"), "mismatched_model", 2),
    ],
    ids=["invalid-json", "duplicate-id", "method", "url", "two-models"],
)
def test_openai_invalid_input_fails_the_batch(make_emulator, lines, code, line_no):
    emu = make_emulator()
    client = oai(emu)
    batch = submit_openai(client, data=lines)
    emu.clock.advance(11)
    failed = client.batches.retrieve(batch.id)
    assert failed.status == "failed" and failed.failed_at is not None and failed.output_file_id is None
    (error,) = failed.errors.data
    assert (error.code, error.line) == (code, line_no)


def test_openai_line_and_byte_limits(make_emulator):
    emu = make_emulator(limits=Limits(openai_max_lines=3, openai_max_bytes=100_000))
    client = oai(emu)
    too_many = submit_openai(client, 4)
    too_big = submit_openai(client, data=openai_lines(1) + b" " * 100_001)
    emu.clock.advance(11)
    assert client.batches.retrieve(too_many.id).errors.data[0].code == "too_many_requests"
    assert client.batches.retrieve(too_big.id).errors.data[0].code == "file_too_large"


def test_openai_create_errors(make_emulator):
    client = oai(make_emulator())
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    upload = client.files.create(file=("i.jsonl", openai_lines(1)), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="1h")
    with pytest.raises(openai.BadRequestError, match="metadata"):
        client.batches.create(
            input_file_id=upload.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={f"k{i}": "v" for i in range(17)},
        )


def test_openai_expiry_with_part_done(make_emulator):
    emu = make_emulator(faults=Faults(batch_expire_rate=1.0, expire_fraction=0.5))
    client = oai(emu)
    batch = submit_openai(client, 6)
    emu.clock.advance(100)
    expired = client.batches.retrieve(batch.id)
    assert expired.status == "expired" and expired.expired_at is not None
    assert (expired.request_counts.completed, expired.request_counts.failed) == (3, 3)
    errors = read_jsonl(client.files.content(expired.error_file_id).text)
    assert {e["error"]["code"] for e in errors} == {"batch_expired"} and all(e["response"] is None for e in errors)
    assert len(read_jsonl(client.files.content(expired.output_file_id).text)) == 3


def test_openai_completion_window_closes(make_emulator):
    emu = make_emulator(
        timing=Timing(validate_seconds=1, seconds_per_request=10, finalize_seconds=1, completion_window_seconds=35)
    )
    client = oai(emu)
    batch = submit_openai(client, 5)
    emu.clock.advance(1000)
    expired = client.batches.retrieve(batch.id)
    assert expired.status == "expired" and expired.request_counts.completed == 3


def test_openai_cancel_keeps_partial_output(make_emulator):
    emu = make_emulator()
    client = oai(emu)
    batch = submit_openai(client, 6)
    emu.clock.advance(12.5)  # two requests done
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    emu.clock.advance(6)
    cancelled = client.batches.retrieve(batch.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
    assert (cancelled.request_counts.completed, cancelled.request_counts.failed) == (2, 4)
    codes = {e["error"]["code"] for e in read_jsonl(client.files.content(cancelled.error_file_id).text)}
    assert codes == {"batch_cancelled"}


def test_openai_request_errors_go_to_the_error_file(make_emulator):
    emu = make_emulator(faults=Faults(request_error_rate=0.5), seed=3)
    client = oai(emu)
    batch = submit_openai(client, 20)
    emu.clock.advance(100)
    done = client.batches.retrieve(batch.id)
    errors = read_jsonl(client.files.content(done.error_file_id).text)
    outputs = read_jsonl(client.files.content(done.output_file_id).text)
    assert done.status == "completed" and 0 < len(errors) < 20 and len(errors) + len(outputs) == 20
    assert done.request_counts.failed == len(errors)
    assert all(
        e["response"]["status_code"] == 500 and e["response"]["body"]["error"]["type"] == "server_error" for e in errors
    )


def test_openai_validation_failure_and_slow_faults(make_emulator):
    emu = make_emulator(faults=Faults(batch_validation_failure_rate=1.0))
    client = oai(emu)
    batch = submit_openai(client, 2)
    emu.clock.advance(11)
    assert client.batches.retrieve(batch.id).status == "failed"
    slow = make_emulator(faults=Faults(slow_batch_rate=1.0, slow_factor=10))
    slow_client = oai(slow)
    batch = submit_openai(slow_client, 2)
    slow.clock.advance(50)  # a normal batch would be done by now
    assert slow_client.batches.retrieve(batch.id).status == "validating"
    slow.clock.advance(1000)
    assert slow_client.batches.retrieve(batch.id).status == "completed"


def test_openai_batch_pagination(make_emulator):
    emu = make_emulator()
    client = oai(emu)
    ids = []
    for _ in range(5):
        ids.append(submit_openai(client, 1).id)
        emu.clock.advance(1)
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more
    assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # auto-pagination follows `after`
    page = client.batches.list(limit=2, after=ids[1])
    assert [b.id for b in page.data] == [ids[0]] and not page.has_more


def test_truncated_download(make_emulator):
    emu = make_emulator(faults=Faults(truncate_rate=1.0))
    client = oai(emu)
    upload = client.files.create(file=("i.jsonl", openai_lines(50)), purpose="batch")
    with pytest.raises(openai.APIConnectionError):
        client.files.content(upload.id)


def test_emulator_survives_a_restart_with_state(make_emulator, tmp_path):
    state = str(tmp_path / "state")
    first = stepped(state)
    client = oai(first)
    batch = submit_openai(client, 3)
    first.stop()
    second = make_emulator(state_dir=state)
    second.clock.advance(100)
    again = oai(second).batches.retrieve(batch.id)
    assert again.status == "completed" and again.request_counts.completed == 3


class CountingResponder:
    """The emulator's responder, counting the answers it gives."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def answer(self, *args, **kwargs):
        self.calls += 1
        return self.inner.answer(*args, **kwargs)


def test_openai_batches_are_answered_as_their_schedule_reaches_them_and_survive_a_restart(make_emulator, tmp_path):
    """Each look at a batch answers what its clock has reached since the last (a poll never computes a whole batch),
    and a restart in the middle answers each request once."""
    state = str(tmp_path / "state")
    first = stepped(state)
    counting = first.emulation.responder = CountingResponder(first.emulation.responder)
    client = oai(first)
    batch = submit_openai(client, 40)
    first.clock.advance(10 + 15.5)  # validated, then 15 requests at one second each
    midway = client.batches.retrieve(batch.id)
    assert midway.status == "in_progress" and midway.request_counts.completed == 15 and counting.calls == 15
    first.clock.advance(10)
    assert client.batches.retrieve(batch.id).request_counts.completed == 25 and counting.calls == 25
    first.stop()
    second = make_emulator(state_dir=state)
    second.clock.advance(1000)
    client = oai(second)
    done = client.batches.retrieve(batch.id)
    lines = read_jsonl(client.files.content(done.output_file_id).text)
    ids = [line["custom_id"] for line in lines]
    assert done.status == "completed" and sorted(ids) == sorted(f"req-{i}" for i in range(40))
    assert ids != sorted(ids, key=lambda c: int(c.split("-")[1]))  # shuffled, as the service promises no order
    for line in lines:
        number = 1000000 + int(line["custom_id"].split("-")[1])
        assert str(number) in line["response"]["body"]["choices"][0]["message"]["content"]


def test_anthropic_batches_are_answered_as_their_schedule_reaches_them(make_emulator, tmp_path):
    state = str(tmp_path / "state")
    first = stepped(state)
    counting = first.emulation.responder = CountingResponder(first.emulation.responder)
    batch = ant(first).messages.batches.create(requests=anthropic_requests(30))
    first.clock.advance(12.5)
    assert ant(first).messages.batches.retrieve(batch.id).processing_status == "in_progress"
    assert counting.calls == 12
    first.stop()
    second = make_emulator(state_dir=state)
    second.clock.advance(1000)
    results = list(ant(second).messages.batches.results(batch.id))
    assert sorted(r.custom_id for r in results) == sorted(f"req-{i}" for i in range(30))
    assert all(r.result.type == "succeeded" for r in results)
    assert not list((tmp_path / "state" / "files").glob("part-*"))  # the batch's working files are gone


def test_a_batch_whose_time_is_up_has_done_every_request():
    """Where the clock says all is processed, all is: not one short by the rounding of start + total x per."""
    from nspec.runners.emulator.config import schedule

    batch = {"created": 1795474075.123, "total": 99_999, "slow": 1, "expire_fraction": None}
    t = schedule(batch, Timing(validate_seconds=0, seconds_per_request=0.0002, finalize_seconds=0))
    assert math.floor((t.processed - t.start) / t.per) == 99_998  # what the arithmetic alone gives
    assert t.done_by(99_999, t.processed) == 99_999 and t.done_by(99_999, t.processed - 0.0002) < 99_999


def test_mistral_jobs_are_answered_as_their_schedule_reaches_them_and_a_cancel_keeps_what_finished(
    make_emulator, tmp_path
):
    """Mistral's and Together's jobs (`body_batches`): answered a request at a time as the clock reaches them, across
    a restart; a cancelled job's output holds what finished, nothing for the rest."""
    from mistralai.client import Mistral

    state = str(tmp_path / "state")
    first = stepped(state, api_key="k")
    counting = first.emulation.responder = CountingResponder(first.emulation.responder)
    lines = [
        {"custom_id": f"req-{i}", "body": {"messages": [{"role": "user", "content": needle_prompt(i)}]}}
        for i in range(30)
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    client = Mistral(api_key="k", server_url=first.mistral_base_url)
    uploaded = client.files.upload(file={"file_name": "in.jsonl", "content": data}, purpose="batch")
    job = client.batch.jobs.create(
        input_files=[uploaded.id], model="mistral-small-latest", endpoint="/v1/chat/completions"
    )
    first.clock.advance(10 + 12.5)  # queued, then 12 requests at one second each
    midway = client.batch.jobs.get(job_id=job.id)
    assert midway.status == "RUNNING" and midway.completed_requests == 12 and counting.calls == 12
    stopped_at = first.clock.now()
    first.stop()
    second = make_emulator(state_dir=state, api_key="k")
    counting = second.emulation.responder = CountingResponder(second.emulation.responder)
    second.clock.advance(stopped_at + 5 - second.clock.now())  # five requests later
    client = Mistral(api_key="k", server_url=second.mistral_base_url)
    client.batch.jobs.cancel(job_id=job.id)
    second.clock.advance(60)
    cancelled = client.batch.jobs.get(job_id=job.id)
    assert cancelled.status == "CANCELLED" and cancelled.succeeded_requests == 17 and counting.calls == 5
    out = [json.loads(x) for x in client.files.download(file_id=cancelled.output_file).iter_lines()]
    ids = sorted(int(x["custom_id"].split("-")[1]) for x in out)
    assert ids == list(range(17))  # each request answered once, the ones never reached left out
    for line in out:
        number = 1000000 + int(line["custom_id"].split("-")[1])
        assert str(number) in line["response"]["body"]["choices"][0]["message"]["content"]
    assert not list((tmp_path / "state" / "files").glob("part-*"))  # the job's working files are gone


# -- OpenAI: live -------------------------------------------------------------------------------------------------


def test_openai_chat_completion(make_emulator):
    client = oai(make_emulator())
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4.1-mini",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": needle_prompt(7)}],
        max_completion_tokens=40,
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "The special magic code of crate 7 is: 1000007."
    assert completion.choices[0].finish_reason == "stop" and completion.usage.prompt_tokens > 0
    for name in ("limit", "remaining", "reset"):
        assert raw.headers[f"x-ratelimit-{name}-requests"] and raw.headers[f"x-ratelimit-{name}-tokens"]


def test_openai_max_tokens_cuts_the_answer(make_emulator):
    client = oai(make_emulator())
    completion = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": needle_prompt(1)}], max_tokens=3
    )
    assert completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 3


def test_openai_rate_limit(make_emulator):
    client = oai(make_emulator(rate_limits=RateLimits(requests_per_minute=2)))
    messages = [{"role": "user", "content": needle_prompt(1)}]
    first = client.chat.completions.with_raw_response.create(model="gpt-4.1-mini", messages=messages)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    client.chat.completions.create(model="gpt-4.1-mini", messages=messages)
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="gpt-4.1-mini", messages=messages)
    headers = info.value.response.headers
    assert int(headers["retry-after-ms"]) > 0 and int(headers["retry-after"]) >= 1
    assert info.value.code == "rate_limit_exceeded"


@pytest.mark.parametrize(
    "fault, error",
    [
        ("server_error_rate", openai.InternalServerError),
        ("overloaded_rate", openai.InternalServerError),
        ("drop_rate", openai.APIConnectionError),
    ],
)
def test_openai_live_faults(make_emulator, fault, error):
    client = oai(make_emulator(faults=Faults(**{fault: 1.0})))
    with pytest.raises(error):
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi there"}])


# -- Anthropic ----------------------------------------------------------------------------------------------------


def test_anthropic_message_with_prefill(make_emulator):
    client = ant(make_emulator())
    raw = client.messages.with_raw_response.create(
        model="claude-haiku-4-5",
        max_tokens=40,
        system="Answer from the context.",
        messages=[{"role": "user", "content": needle_prompt(3)}, {"role": "assistant", "content": "The special"}],
    )
    message = raw.parse()
    assert message.content[0].text == " magic code of crate 3 is: 1000003."  # continues the prefill
    assert message.stop_reason == "end_turn" and message.usage.input_tokens > 0
    assert raw.headers["request-id"] and raw.headers["anthropic-ratelimit-requests-remaining"]
    assert RFC3339.match(raw.headers["anthropic-ratelimit-tokens-reset"])


def test_anthropic_count_tokens(make_emulator):
    client = ant(make_emulator())
    count = client.messages.count_tokens(model="claude-haiku-4-5", messages=[{"role": "user", "content": "hello"}])
    assert count.input_tokens == 3 + 4 + 1


def test_anthropic_auth_and_errors(make_emulator):
    emu = make_emulator()
    missing = httpx.post(f"{emu.anthropic_base_url}/v1/messages", json={}, headers={"anthropic-version": "x"})
    assert missing.status_code == 401
    assert missing.json()["type"] == "error" and missing.json()["error"]["type"] == "authentication_error"
    assert missing.headers["request-id"]
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: Field required"):
        httpx_body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "x"}]}
        ant(emu).post("/v1/messages", body=httpx_body, cast_to=object)
    with pytest.raises(anthropic.NotFoundError):
        ant(emu).messages.batches.retrieve("msgbatch_nope")


def test_anthropic_rate_limit_and_overload(make_emulator):
    client = ant(make_emulator(rate_limits=RateLimits(tokens_per_minute=200)))
    with pytest.raises(anthropic.RateLimitError) as info:
        hello = [{"role": "user", "content": "hello"}]
        client.messages.create(model="claude-haiku-4-5", max_tokens=500, messages=hello)
    assert info.value.body["error"]["type"] == "rate_limit_error" and info.value.response.headers["retry-after"]
    overloaded = ant(make_emulator(faults=Faults(overloaded_rate=1.0)))
    with pytest.raises(anthropic.OverloadedError):
        overloaded.messages.create(model="claude-haiku-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}])


def test_anthropic_batch_lifecycle(make_emulator):
    emu = make_emulator(faults=Faults(request_error_rate=0.3), seed=5)
    client = ant(emu)
    requests = anthropic_requests(10)
    requests[9]["params"]["max_tokens"] = 0  # invalid values come back as errored results
    batch = client.messages.batches.create(requests=requests)
    assert batch.processing_status == "in_progress" and batch.results_url is None
    emu.clock.advance(5)
    midway = client.messages.batches.retrieve(batch.id)
    assert midway.request_counts.processing == 10 and midway.request_counts.succeeded == 0  # zero until the end
    emu.clock.advance(100)
    ended = client.messages.batches.retrieve(batch.id)
    counts = ended.request_counts
    assert ended.processing_status == "ended" and ended.ended_at is not None and ended.results_url
    assert counts.processing == 0 and counts.succeeded + counts.errored == 10 and counts.errored >= 1
    results = list(client.messages.batches.results(batch.id))
    assert sorted(r.custom_id for r in results) == sorted(r["custom_id"] for r in requests)
    kinds = {r.custom_id: r.result.type for r in results}
    assert kinds["req-9"] == "errored" and list(kinds.values()).count("succeeded") == counts.succeeded
    for r in results:
        if r.result.type == "succeeded":
            assert str(1000000 + int(r.custom_id.split("-")[1])) in r.result.message.content[0].text


def test_anthropic_raw_objects_match_the_sdk_types(make_emulator):
    emu = make_emulator()
    batch = ant(emu).messages.batches.create(requests=anthropic_requests(1))
    emu.clock.advance(100)
    raw = httpx.get(
        f"{emu.anthropic_base_url}/v1/messages/batches/{batch.id}",
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
    ).json()
    MessageBatch.model_validate(raw)
    for name in ("created_at", "expires_at", "ended_at"):
        assert isinstance(raw[name], str) and RFC3339.match(raw[name])  # RFC 3339, not Unix seconds
    assert raw["type"] == "message_batch" and raw["archived_at"] is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"custom_id": "has space", "params": {}}, "custom_id: String should match pattern"),
        ({"custom_id": "x" * 65, "params": {}}, "custom_id: String should match pattern"),
        ({"custom_id": "ok", "params": {"model": "m", "messages": []}}, "params.max_tokens: Field required"),
    ],
)
def test_anthropic_batch_validation(make_emulator, bad, message):
    client = ant(make_emulator())
    with pytest.raises(anthropic.BadRequestError, match=re.escape(message)):
        client.messages.batches.create(requests=[*anthropic_requests(1), bad])


def test_anthropic_batch_limits_and_duplicates(make_emulator):
    client = ant(make_emulator(limits=Limits(anthropic_max_requests=3)))
    with pytest.raises(anthropic.BadRequestError, match="at most 3 requests"):
        client.messages.batches.create(requests=anthropic_requests(4))
    with pytest.raises(anthropic.BadRequestError, match="duplicate custom_id"):
        client.messages.batches.create(requests=anthropic_requests(1) * 2)
    small = ant(make_emulator(limits=Limits(anthropic_max_bytes=2000)))
    with pytest.raises(anthropic.APIStatusError, match="maximum allowed number of bytes") as refused:
        small.messages.batches.create(requests=anthropic_requests(20))
    assert refused.value.status_code == 413 and refused.value.body["error"]["type"] == "request_too_large"


def test_anthropic_cancel_expire_and_delete(make_emulator):
    emu = make_emulator()
    client = ant(emu)
    batch = client.messages.batches.create(requests=anthropic_requests(6))
    with pytest.raises(anthropic.BadRequestError, match="only be deleted once they have ended"):
        client.messages.batches.delete(batch.id)
    emu.clock.advance(2.5)
    canceling = client.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
    emu.clock.advance(6)
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (2, 4)
    assert (
        sorted(r.result.type for r in client.messages.batches.results(batch.id)) == ["canceled"] * 4 + ["succeeded"] * 2
    )
    assert client.messages.batches.delete(batch.id).type == "message_batch_deleted"
    expiring = make_emulator(faults=Faults(batch_expire_rate=1.0, expire_fraction=0.5))
    expiring_client = ant(expiring)
    batch = expiring_client.messages.batches.create(requests=anthropic_requests(4))
    expiring.clock.advance(100)
    counts = expiring_client.messages.batches.retrieve(batch.id).request_counts
    assert (counts.succeeded, counts.expired) == (2, 2)


def test_anthropic_batch_pagination(make_emulator):
    emu = make_emulator()
    client = ant(emu)
    ids = []
    for _ in range(5):
        ids.append(client.messages.batches.create(requests=anthropic_requests(1)).id)
        emu.clock.advance(1)
    newest_first = ids[::-1]
    page = client.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == newest_first[:2] and page.has_more and page.last_id == newest_first[1]
    assert [b.id for b in client.messages.batches.list(limit=2)] == newest_first
    after = client.messages.batches.list(limit=2, after_id=newest_first[1])
    assert [b.id for b in after.data] == newest_first[2:4]
    before = client.messages.batches.list(limit=2, before_id=newest_first[3])
    assert [b.id for b in before.data] == newest_first[1:3]


def test_anthropic_truncated_results(make_emulator):
    emu = make_emulator(faults=Faults(truncate_rate=1.0))
    client = ant(emu)
    batch = client.messages.batches.create(requests=anthropic_requests(30))
    emu.clock.advance(100)
    with pytest.raises((anthropic.APIConnectionError, httpx.RemoteProtocolError)):
        list(client.messages.batches.results(batch.id))


# -- Responders ---------------------------------------------------------------------------------------------------


def test_oracle_not_found_and_degrade(make_emulator):
    client = oai(make_emulator(responder=Responder(degrade=Degrade(miss_beyond_depth=50))))
    absent = "The weather was fine all week.\n\nWhat is the special magic code of crate 4?"
    reply = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": absent}])
    assert reply.choices[0].message.content.startswith("UNANSWERABLE")
    early = (
        "The special magic code of crate 4 is: 1000004. " + "Filler sentence here. " * 50 + "\nWhat is the "
        "special magic code of crate 4?"
    )
    late = (
        "Filler sentence here. " * 50 + "The special magic code of crate 4 is: 1000004.\nWhat is the special "
        "magic code of crate 4?"
    )
    assert (
        "1000004"
        in client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": early}])
        .choices[0]
        .message.content
    )
    assert (
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": late}])
        .choices[0]
        .message.content.startswith("UNANSWERABLE")
    )


def test_oracle_picks_the_target_among_distractors_and_answers_multi_value(make_emulator):
    client = oai(make_emulator())
    context = (
        "One of the special magic numbers for kettle-harbor is: 111. Some text. One of the special magic "
        "numbers for walnut-signal is: 222. More text. One of the special magic numbers for kettle-harbor "
        "is: 333.\nWhat are all the special magic numbers for kettle-harbor?"
    )
    answer = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": context}])
    text = answer.choices[0].message.content
    assert "111" in text and "333" in text and "222" not in text


def test_echo_responder(make_emulator):
    client = oai(make_emulator(responder=Responder(kind="echo")))
    said = [{"role": "user", "content": "say this back"}]
    reply = client.chat.completions.create(model="gpt-4.1-mini", messages=said)
    assert reply.choices[0].message.content == "say this back"


# -- Scale --------------------------------------------------------------------------------------------------------


def ended_without_polls(emu, table: dict, batch_id: str) -> None:
    """Wait for the emulator's worker to end a batch, with no HTTP call asking about it: a service works on its
    batches whether or not anyone polls."""
    calls = sum(emu.emulation.statuses.values())
    deadline = time.monotonic() + 120
    while table[batch_id]["final"] is None:
        assert time.monotonic() < deadline, "the batch did not end"
        time.sleep(0.05)
    assert sum(emu.emulation.statuses.values()) == calls


def test_ten_thousand_requests_per_provider(make_emulator):
    """The official SDKs run a batch of 10,000 requests to completion on each provider; the answering goes on
    between polls, and a poll never waits for more than one look's work."""
    emu = make_emulator(timing=Timing())  # the default, fast durations
    client = oai(emu)
    batch = submit_openai(client, 10_000)
    emu.clock.advance(60)
    first = client.batches.retrieve(batch.id)  # answers for at most a look, then says how far it got
    assert first.status in ("in_progress", "finalizing", "completed")
    ended_without_polls(emu, emu.emulation.store.openai_batches, batch.id)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.request_counts.completed == 10_000
    assert len(client.files.content(done.output_file_id).text.splitlines()) == 10_000
    messages = ant(emu)
    mbatch = messages.messages.batches.create(requests=anthropic_requests(10_000))
    emu.clock.advance(60)
    ended_without_polls(emu, emu.emulation.store.anthropic_batches, mbatch.id)
    assert messages.messages.batches.retrieve(mbatch.id).request_counts.succeeded == 10_000
    assert sum(1 for _ in messages.messages.batches.results(mbatch.id)) == 10_000


def test_emulator_command(tmp_path):
    """`nspec emulator` in its own process: prints its base URLs, serves the SDKs, stops on SIGTERM."""
    import subprocess
    import sys

    config = tmp_path / "emulator.yaml"
    config.write_text("api_key: secret\nresponder: {kind: echo}\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "nspec", "emulator", "--port", "0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        openai_url = server.stdout.readline().split()[-1]
        anthropic_url = server.stdout.readline().split()[-1]
        google_url = server.stdout.readline().split()[-1]
        mistral_url = server.stdout.readline().split()[-1]
        azure_url, groq_url, together_url = (server.stdout.readline().split()[-1] for _ in range(3))
        assert openai_url == anthropic_url + "/v1" and google_url == anthropic_url + "/google"
        assert mistral_url == anthropic_url + "/mistral" and azure_url == anthropic_url + "/azure"
        assert groq_url == anthropic_url + "/groq/openai/v1" and together_url == anthropic_url + "/together"
        assert server.stdout.readline().startswith("Only the API key set in the config (api_key) is accepted")
        client = openai.OpenAI(api_key="secret", base_url=openai_url, max_retries=0, _strict_response_validation=True)
        reply = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "echo me"}])
        assert reply.choices[0].message.content == "echo me"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(api_key="wrong", base_url=openai_url, max_retries=0).batches.list()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert server.returncode is not None


def test_emulator_command_bad_config(tmp_path, cli):
    config = tmp_path / "bad.yaml"
    config.write_text("faults: {sever_error_rate: 1}\n")
    result = cli("emulator", "--port", "0", "--config", str(config))
    assert result.code == 2
    assert "unknown key `config.faults.sever_error_rate`" in result.err
