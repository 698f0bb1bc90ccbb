"""trainers.models.chat_template: a model's chat template renders as transformers renders it, and a hostile one
(reaching for Python's internals, looping, recursing or growing a string without end) is stopped within seconds and
a bounded amount of memory, as one InvalidInput line. Memory is measured in a fresh subprocess (peak RSS, VmHWM)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from storage.errors import InvalidInput
from trainers.models.chat_template import render_chat_template

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>there</b>"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Again?"}]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}
TEMPLATES = {  # what real chat templates use: loops, namespaces, filters, tojson, strftime_now, generation tags
    "chatml": ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "llama-3": ("{{ bos_token }}{% set ns = namespace(system='') %}{% for m in messages %}"
                "{% if m.role == 'system' %}{% set ns.system = m.content %}{% else %}"
                "<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ (ns.system ~ ' ' ~ m.content) | trim }}"
                "<|eot_id|>{% endif %}{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant"
                "<|end_header_id|>\n\n{% endif %}"),
    "tools-and-json": ("{{ messages | map(attribute='role') | join(',') }}|{{ messages[1] | tojson }}|"
                       "{{ '%s-%d' % ('a', 3) }}|{{ '{}:{}'.format('k', 42) }}|{{ 'x'.center(9, '*') }}|"
                       "{{ (messages | length) * 2 }}|{{ range(3) | list }}|{{ 2 ** 10 }}|"
                       "{{ dict(a=1) | tojson }}|{{ strftime_now('%Y') | length }}"),
    "generation": ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                   "{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"),
    "refuses": "{% if messages[0].role == 'system' %}{{ raise_exception('no system turn') }}{% endif %}",
}


@pytest.mark.parametrize("name", [name for name in TEMPLATES if name != "refuses"])
def test_templates_render_exactly_as_transformers_renders_them(name):
    for add_generation_prompt in (True, False):
        expected = render_jinja_template([MESSAGES], chat_template=TEMPLATES[name],
                                         add_generation_prompt=add_generation_prompt, **SPECIALS)[0][0]
        assert render_chat_template(TEMPLATES[name], messages=MESSAGES, add_generation_prompt=add_generation_prompt,
                                    **SPECIALS) == expected


def test_a_template_that_refuses_a_conversation_says_why_in_one_line():
    with pytest.raises(InvalidInput, match="the model's chat template failed .*no system turn"):
        render_chat_template(TEMPLATES["refuses"], messages=MESSAGES)


HOSTILE = {  # template -> what the error says
    "{{ ''.__class__.__mro__[1].__subclasses__() }}": "access to attribute '__class__'",
    "{{ messages.__class__.__name__ }}": "access to attribute '__class__'",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}": "stopped: it",
    "{% for c in 'x' * 1000000 %}{% for d in 'x' * 1000000 %}{% endfor %}{% endfor %}": "stopped: it",
    "{{ 'x' * 100000 * 100000 }}": "10,000,000,000",
    "{{ [1] * 1000000000 }}": "1,000,000,000",
    "{{ ('x' * 1000000).encode() * 1000 }}": "1,000,000,000",
    "{{ (range(100000) | list) * 100000 }}": "10,000,000,000",
    "{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}": "a text of",
    "{% set ns = namespace(s=['x']) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}": "a text of",
    "{{ 'x' * 999999 ~ 'y' * 999999 }}": "1,999,998",
    "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}": "an output of",
    "{{ 'x' | center(1000000000) }}": "center was given 1,000,000,000",
    "{{ 'x\n' * 100000 | indent('y' * 100000) }}": "indent was given a text",
    "{{ ('x' * 100000) | replace('x', 'x' * 100000) }}": "10,000,000,000",
    "{{ ('x' * 100000).replace('x', 'x' * 100000) }}": "10,000,000,000",
    "{{ range(100000) | join('x' * 100000) }}": "a text of",
    "{{ ('x' * 100000).join(range(100000) | map('string')) }}": "a text of",
    "{{ 'x'.center(1000000000) }}": "center to a width",
    "{{ '%*d' % (1000000000, 1) }}": "a width of 10,000 or more from its arguments",
    "{{ '%0999999999d' % 1 }}": "a width or precision of 10,000 or more",
    "{{ '{:{}}'.format(1, 1000000000) }}": "a width of 10,000 or more from its arguments",
    "{{ '{:>999999999}'.format(1) }}": "a width or precision of 10,000 or more",
    "{{ 'abc'.translate({97: 'x' * 1000000}) }}": "str.translate is not allowed",
    "{{ 10 ** (10 ** 10) }}": "bits",
    "{% set ns = namespace(n=10) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}": "bits",
    "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}": "stopped: it",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}": "RecursionError",
    "{{ lipsum(100000) }}": "UndefinedError",
    "{{ range(10000000) }}": "a range of 10,000,000 numbers",
    "{{ (range(100) | batch(1000000000, 'x')) | list }}": "batch was given 1,000,000,000",
    "{% for x in messages %}{% for y in messages recursive %}{{ loop(messages) }}{% endfor %}{% endfor %}":
        "RecursionError",
    "{{ messages | tojson(indent=100000000) }}": "tojson was given 100,000,000",
    "{% for": "does not parse",
}


@pytest.mark.parametrize("template", list(HOSTILE))
def test_a_hostile_template_is_stopped_fast_in_one_line(template):
    started = time.monotonic()
    with pytest.raises(InvalidInput) as refused:
        render_chat_template(template, messages=MESSAGES, add_generation_prompt=True, **SPECIALS)
    message = str(refused.value)
    assert HOSTILE[template] in message and "\n" not in message and message.startswith("the model's chat template")
    assert time.monotonic() - started < 10


MEASURE = """
import json, sys
import psutil
from storage.errors import InvalidInput
from trainers.models.chat_template import render_chat_template

before = psutil.Process().memory_info().rss / 2**20
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak RSS starts again from now
for template in json.loads(sys.argv[1]):
    try:
        render_chat_template(template, messages=[{"role": "user", "content": "hi"}])
    except InvalidInput:
        pass
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(peak - before)
"""


def test_every_hostile_template_together_costs_a_bounded_amount_of_memory():
    ran = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(list(HOSTILE))], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert float(ran.stdout.splitlines()[-1]) < 150  # MB; unbounded, one of them alone asks for 10 GB
