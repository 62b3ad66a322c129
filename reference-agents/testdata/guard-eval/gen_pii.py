#!/usr/bin/env python3
"""Generates pii.jsonl, the PII part of the guardrail evaluation corpus.

Values come from the `faker` package (MIT licence, PyPI), not from this
project: phone numbers of its en_US, en_GB, de_DE and fr_FR providers, and
e-mail, card, IBAN, SSN and IPv4 values. Benign sentences carry numbers that
are not personal data (order ids, dates, times, versions, prices,
quantities), also drawn from faker. Run at development time only, then
commit the output:

    python3 -m venv /tmp/fk && /tmp/fk/bin/pip install faker==40.54.0
    /tmp/fk/bin/python gen_pii.py > pii.jsonl

Every line: {"split": "train"|"test", "type": <pii type or "benign">,
"locale": ..., "value": <the personal value or null>, "text": <sentence>}.
"""

import json
import random

from faker import Faker

SEED = 24
PER_LOCALE = 200
OTHER = 100
BENIGN = 400

PHONE_TEMPLATES = [
    "Call me at {v} tomorrow.",
    "My number is {v}",
    "You can reach the office on {v} between 9 and 5.",
    "Tel: {v}",
    "Please ring {v} if the parcel is late.",
    "{v} is my mobile, text before calling.",
    "Contact: John, {v}, available after 6pm.",
    "Rufen Sie mich unter {v} an.",
    "Appelez-moi au {v} svp.",
]

OTHER_TEMPLATES = [
    "Here it is: {v}",
    "Please update my record with {v} before Friday.",
    "The value on file is {v}, can you confirm?",
]


def benign(fake: Faker, rng: random.Random) -> str:
    kinds = [
        lambda: f"Order #{fake.random_number(digits=rng.choice([5, 6, 7, 8]), fix_len=True)} shipped on {fake.date()}.",
        lambda: f"Your order {fake.bothify('??-#####').upper()} totals ${fake.pyfloat(left_digits=3, right_digits=2, positive=True)}.",
        lambda: f"The meeting moved to {fake.time(pattern='%H:%M')} on {fake.date(pattern='%d.%m.%Y')}.",
        lambda: f"Upgrade to version {rng.randint(0, 12)}.{rng.randint(0, 40)}.{rng.randint(0, 200)} before {fake.date(pattern='%m/%d/%Y')}.",
        lambda: f"Invoice {fake.random_number(digits=6, fix_len=True)} of {fake.date(pattern='%Y-%m-%d')}: {rng.randint(1, 99)} items, EUR {rng.randint(10, 9999)},{rng.randint(10, 99)}.",
        lambda: f"Room {rng.randint(100, 999)}, floor {rng.randint(1, 40)}, check-in at {fake.time(pattern='%I:%M %p')}.",
        lambda: f"The population grew from {rng.randint(1000, 99999):,} in {rng.randint(1900, 1990)} to {rng.randint(100000, 9999999):,} in {rng.randint(1991, 2024)}.",
        lambda: f"Build {fake.random_number(digits=4, fix_len=True)} took {rng.randint(1, 59)} min {rng.randint(1, 59)} s on {fake.date_time().isoformat()}.",
        lambda: f"Ticket {fake.bothify('INC-########')} was opened on {fake.date(pattern='%d/%m/%Y')} at {fake.time()}.",
        lambda: f"Lat {fake.latitude()}, long {fake.longitude()}, elevation {rng.randint(0, 4000)} m.",
        lambda: f"ISBN {fake.isbn13()} costs {rng.randint(5, 80)}.{rng.randint(0, 99):02d} USD.",
        lambda: f"The score was {rng.randint(0, 120)} to {rng.randint(0, 120)} in {rng.randint(1950, 2025)}, attendance {rng.randint(1000, 99999)}.",
        lambda: f"Ref. {fake.random_number(digits=9, fix_len=True)} / {fake.date(pattern='%Y')}, amount {rng.randint(100, 99999)}.00",
        lambda: f"Run `pip install foo=={rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}` and restart at {fake.time(pattern='%H:%M:%S')}.",
    ]
    return rng.choice(kinds)()


def main() -> None:
    rng = random.Random(SEED)
    Faker.seed(SEED)
    rows = []
    for locale in ["en_US", "en_GB", "de_DE", "fr_FR"]:
        fake = Faker(locale)
        for _ in range(PER_LOCALE):
            v = fake.phone_number()
            rows.append({"type": "phone", "locale": locale, "value": v, "text": rng.choice(PHONE_TEMPLATES).format(v=v)})
    fake = Faker("en_US")
    gens = {
        "email": fake.email,
        "credit_card": fake.credit_card_number,
        "iban": Faker("de_DE").iban,
        "ssn": fake.ssn,
        "ipv4": fake.ipv4_public,
    }
    for t, gen in gens.items():
        for _ in range(OTHER):
            v = gen()
            rows.append({"type": t, "locale": "en_US", "value": v, "text": rng.choice(OTHER_TEMPLATES).format(v=v)})
    for _ in range(BENIGN):
        rows.append({"type": "benign", "locale": "en_US", "value": None, "text": benign(fake, rng)})
    for i, r in enumerate(rows):
        r = {"split": "test" if i % 2 else "train", **r}
        print(json.dumps(r, ensure_ascii=False))


if __name__ == "__main__":
    main()
