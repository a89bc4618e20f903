"""Stopwords removed from analysed text: function words that carry no retrieval signal."""

ENGLISH = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if in into is it
    its me my no not of on or our should so than that the their them then there these they this those to
    too was we were what when where which while who why will with would you your yours""".split()
)

CHINESE = frozenset(
    """的 了 是 在 和 与 及 或 也 就 都 而 被 把 让 给 对 从 向 于 以 为 之 其 这 那 这个 那个 这些 那些 一个 一些
    一下 一种 我 你 他 她 它 我们 你们 他们 吗 呢 吧 啊 呀 么 嘛 什么 怎么 怎样 怎么办 如何 为什么 哪些 哪个
    哪里 多少 是否 能否 可以 能 会 要 需要 应该 有 没有 不 没 很 还 又 再 更 最 吧 时 时候 之后 之前 以及 如果
    那么 因为 所以 但是 然后 并 并且 等 等等 中 上 下 里 呢 着 过 得 地 个 该 此 每 各 请 请问 意思 怎么样 怎么回事""".split()
)

ALL = ENGLISH | CHINESE
