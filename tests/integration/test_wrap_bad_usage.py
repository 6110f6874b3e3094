"""A provider's usage block that is no token count (an OpenAI-compatible server sending
-1 for "unknown", or a number past durably.limits.TOKENS_MAX) does not fail the run
after the model was paid for: the call's result is recorded, its spend entry is counted
with the bad count as 0, and one warning names the model and the field. Once,
``durably.usage`` refused the count inside the recorded step: the response was lost, no
spend entry was written, and the run ended ``failed``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import openai
import pytest

import durably
from durably.integrations import IntegrationWarning
from durably.integrations.openai import wrap

from .model_servers import ModelServer, Reply, chat_completion


@pytest.mark.parametrize("bad", [-1, 10**30], ids=["negative", "past-the-bound"])
def test_a_response_whose_usage_is_no_token_count_is_recorded_and_counted_as_zero(
    tmp_path: Path, bad: int
) -> None:
    def reply(path: str, body: dict[str, Any]) -> Reply:
        data = chat_completion("hi", prompt_tokens=3, completion_tokens=2)
        data["usage"]["prompt_tokens"] = bad
        return 200, {}, data

    server = ModelServer(reply)
    try:
        client = wrap(
            openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1"),
            prices={"gpt-test": (1.0, 2.0)},
        )
        with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

            @engine.workflow(name="wf")
            def wf(ctx: durably.Context) -> str:
                resp = client.chat.completions.create(
                    model="gpt-test", messages=[{"role": "user", "content": "hi"}]
                )
                return str(resp.choices[0].message.content)

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert engine.run("wf", run_id="r1") == "hi"
            spend = engine.spend("r1")
            assert engine.run("wf", run_id="r1") == "hi"  # and replays
        assert server.count() == 1
        assert (spend.entries, spend.input_tokens, spend.output_tokens) == (1, 0, 2)
        assert spend.cost_usd == pytest.approx(2 * 2.0 / 1e6)
        [warning] = [w for w in caught if issubclass(w.category, IntegrationWarning)]
        assert "prompt_tokens" in str(warning.message) and "gpt-test" in str(warning.message)
    finally:
        server.close()
