import pytest

from cirrus.api.keep_alive import parse_keep_alive
from cirrus.api.protocol import WireProtocol, protocol_for
from cirrus.runtime.frames import FrameError, decode, encode, frame_length
from cirrus.runtime.params import GenerationInput, SamplingParams


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), (30, 30.0), (0, 0.0), ("45s", 45.0), ("5m", 300.0), ("1h", 3600.0), ("2", 2.0)],
)
def test_keep_alive_accepts_seconds_and_durations(value: float | str | None, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "-5s", -1, "5 days", 10**9])
def test_keep_alive_refuses_nonsense(value: float | str) -> None:
    with pytest.raises(ValueError, match="keep_alive"):
        parse_keep_alive(value)


def test_paths_map_to_their_protocol() -> None:
    assert protocol_for("/v1/chat/completions") is WireProtocol.OPENAI
    assert protocol_for("/client/v4/accounts/a/ai/v1/models") is WireProtocol.OPENAI
    assert protocol_for("/ai/run/@cf/x/y") is WireProtocol.WORKERS_AI
    assert protocol_for("/client/v4/accounts/a/ai/run/@cf/x/y") is WireProtocol.WORKERS_AI


def test_a_generation_input_survives_the_trip_through_a_frame() -> None:
    sent = GenerationInput(
        messages=({"role": "user", "content": "héllo"},),
        sampling=SamplingParams(max_tokens=7, temperature=0.0, seed=3, stop=("\n", "END")),
    )
    data = encode({"type": "generate", "input": sent.to_frame()})
    frame = decode(data[4:])
    assert frame_length(data[:4]) == len(data) - 4
    assert GenerationInput.from_frame(frame["input"]) == sent


def test_frames_must_be_typed_objects_of_bounded_size() -> None:
    with pytest.raises(FrameError):
        decode(b"[1, 2]")
    with pytest.raises(FrameError):
        frame_length((2**31).to_bytes(4, "big"))
