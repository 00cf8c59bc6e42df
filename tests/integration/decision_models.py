"""A scripted decision model (`langchain_core.decisions`) for `AutoModeMiddleware` tests.

Its own module: `langchain_core.decisions` (and AutoMode) are recent additions to LangChain;
the other stack tests import `stacks` without needing them.
"""

from __future__ import annotations

from typing import Any

from langchain_core.decisions import BaseDecisionModel, ClassifierResponse, NoulAnswer
from pydantic import Field


class ScriptedClassifier(BaseDecisionModel):
    """A decision model for `AutoModeMiddleware`: a call to a tool in `risky` is risky (0.9),
    any other call is not (0.1). Every call it classified is kept in `seen`."""

    model: str = "scripted-classifier"
    risky: frozenset[str] = frozenset()
    seen: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _provider(self) -> str:
        return "scripted"

    def _classify(self, state: Any, questions: Any) -> ClassifierResponse:
        call = state["tool_call"]
        self.seen.append(call)
        noul = 0.9 if call["name"] in self.risky else 0.1
        answers = {key: NoulAnswer(type="noul", noul=noul) for key in questions}
        return ClassifierResponse(model=self.model, answers=answers)
