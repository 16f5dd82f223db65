"""A conversation's next prompt keeps the ids the model sampled, where encoding its text again would merge them.

The tokenizer here has one token for the pair "ab" that its encoder always prefers, as a BPE
merge does, so a reply sampled as "a" then "b" encodes back to other ids than were sampled.
"""

from __future__ import annotations

from typing import Any

from rllm.engine.chat import IM_END, IM_START, ConversationPrompts, TemplateChatParser, render_chatml, template_ids

SPECIALS = (IM_START, IM_END)
PIECES = (*SPECIALS, "ab", "\n", *(chr(code) for code in range(0x20, 0x7F)))


class MergingTokenizer:
    """Greedy longest match over :data:`PIECES`; ChatML as the chat template."""

    chat_template = "chatml"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, at = [], 0
        while at < len(text):
            piece = max((p for p in PIECES if text.startswith(p, at)), key=len)
            ids.append(PIECES.index(piece))
            at += len(piece)
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(PIECES[i] for i in ids if not (skip_special_tokens and PIECES[i] in SPECIALS))

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = False, tokenize: bool = True, **kw: Any
    ) -> Any:
        text = render_chatml(messages, add_generation_prompt=add_generation_prompt)
        return self.encode(text) if tokenize else text


TOKENIZER = MergingTokenizer()
A, B, END = PIECES.index("a"), PIECES.index("b"), PIECES.index(IM_END)
FIRST = [{"role": "user", "content": "hi"}]


def test_the_next_turn_extends_the_sampled_ids_not_their_re_encoding() -> None:
    prompts = ConversationPrompts(TOKENIZER)
    first = prompts.prompt_ids(FIRST)
    assert first == TOKENIZER.encode(f"{IM_START}user\nhi{IM_END}\n{IM_START}assistant\n")
    prompts.sampled(first, [A, B, END])
    conversation = [*FIRST, {"role": "assistant", "content": "ab"}, {"role": "user", "content": "more"}]
    second = prompts.prompt_ids(conversation)
    rest = TOKENIZER.encode(f"\n{IM_START}user\nmore{IM_END}\n{IM_START}assistant\n")
    assert second == [*first, A, B, END, *rest]
    assert template_ids(TOKENIZER, conversation) != second  # encoding the text again merges "ab" into one id
    assert TOKENIZER.decode(second) == render_chatml(conversation, add_generation_prompt=True)


def test_a_rewritten_reply_gives_the_templates_prompt_which_does_not_extend_the_turn() -> None:
    prompts = ConversationPrompts(TOKENIZER)
    first = prompts.prompt_ids(FIRST)
    prompts.sampled(first, [PIECES.index(" "), A, END])  # " a": ChatML strips the space from the history
    conversation = [*FIRST, {"role": "assistant", "content": " a"}, {"role": "user", "content": "more"}]
    second = prompts.prompt_ids(conversation)
    assert second == TOKENIZER.encode(render_chatml(conversation, add_generation_prompt=True))
    assert second[: len(first) + 3] != [*first, PIECES.index(" "), A, END]


def test_the_parser_renders_with_the_tokenizers_template() -> None:
    text = TemplateChatParser(TOKENIZER).parse(FIRST, add_generation_prompt=True, is_first_msg=True)
    assert text == f"{IM_START}user\nhi{IM_END}\n{IM_START}assistant\n"


class CountingTokenizer(MergingTokenizer):
    """Counts renderings and encodings; ``chat_template`` is its text, which a template that reads the clock names."""

    def __init__(self, template: str = "chatml") -> None:
        self.chat_template = template
        self.rendered = self.encoded = 0

    def apply_chat_template(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        self.rendered += 1
        return super().apply_chat_template(messages, **kw)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        self.encoded += 1
        return super().encode(text, add_special_tokens)


def test_a_tasks_rollouts_render_and_encode_their_prompt_once() -> None:
    tokenizer = CountingTokenizer()
    parser = TemplateChatParser(tokenizer)
    other = [{"role": "user", "content": "bye"}]
    prompts = [ConversationPrompts(tokenizer, parser).prompt_ids(m) for m in (FIRST, FIRST, FIRST, other)]
    assert (
        prompts[0]
        == prompts[1]
        == prompts[2]
        == MergingTokenizer().encode(f"{IM_START}user\nhi{IM_END}\n{IM_START}assistant\n")
    )
    assert prompts[3] == MergingTokenizer().encode(render_chatml(other, add_generation_prompt=True))
    assert (tokenizer.rendered, tokenizer.encoded) == (2, 2)
    prompts[0].append(A)  # each call gets its own list
    assert ConversationPrompts(tokenizer, parser).prompt_ids(FIRST) == prompts[1]
    parsed = parser.parse(FIRST, add_generation_prompt=False)  # another rendering of the same messages
    assert parsed == f"{IM_START}user\nhi{IM_END}\n" and tokenizer.rendered == 3


def test_a_template_that_reads_the_clock_or_was_replaced_renders_again() -> None:
    clock = CountingTokenizer("{{ strftime_now('%d %b %Y') }} chatml")
    parser = TemplateChatParser(clock)
    parser.parse(FIRST)
    parser.parse(FIRST)
    assert clock.rendered == 2
    tokenizer = CountingTokenizer()
    parser = TemplateChatParser(tokenizer)
    parser.parse(FIRST)
    tokenizer.chat_template = "another chatml"
    parser.parse(FIRST)
    parser.parse(FIRST)
    assert tokenizer.rendered == 2
