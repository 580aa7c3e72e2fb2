"""English stop words for the lexical channel's queries.

NLTK's English list (function words, pronouns, auxiliaries, question words).
Dropping them from a query, never from the index, sped up BM25 over FTS5 by an
order of magnitude on natural-language questions and raised LoCoMo hit@10 with
SciFact unchanged (docs/benchmarks.md, "Retrieval quality").
"""

from __future__ import annotations

ENGLISH: frozenset[str] = frozenset(
    (
        "a about above after again against ain all am an and any are aren as at be because been before being "
        "below between both but by can couldn d did didn do does doesn doing don down during each few for "
        "from further had hadn has hasn have haven having he her here hers herself him himself his how i if "
        "in into is isn it its itself just ll m ma me mightn more most mustn my myself needn no nor not now "
        "o of off on once only or other our ours ourselves out over own re s same shan she should shouldn so "
        "some such t than that the their theirs them themselves then there these they this those through to "
        "too under until up ve very was wasn we were weren what when where which while who whom why will "
        "with won wouldn y you your yours yourself yourselves "
    ).split()
)
