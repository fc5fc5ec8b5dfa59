"""A labelled retrieval set written for this project (never copied from a public benchmark):
deterministic multi-session conversations over six months and questions whose evidence is
the `(session_id, seq)` turns that answer them.

Each user has a life that moves on (a city, a job, a pet, a trip, a race, a wedding, a
service whose port changes) told across 20 sessions among small talk and technical
questions that share its words. Questions are phrased away from the evidence ("what is my
dog called" for "we brought home a beagle puppy ... named her Miso"), in five categories:

- single-hop: one turn answers it;
- multi-hop: turns of two or more sessions together answer it;
- temporal: it names a time ("in June", "before the move") or asks when;
- open-domain: the persona plus common sense answer it (a vegetarian and a steakhouse);
- adversarial: it asks about something never said; its evidence is the closest turns.

The harder year set (`memory_pipelines.bench.year_set`, `set="year"`) adds seven users with
a year of chats with a chatty friend and two more categories, spread and person.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial", "spread", "person")
FIRST_DAY = date(2026, 3, 2)
SESSIONS = 20
DAYS_APART = 10

NAMES = ("Aiko", "Bruno", "Chiara", "Dev", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kalani", "Lena",
         "Mateo", "Nadia", "Oskar", "Priya")
CITIES = {  # city -> (climate word, what it is known for)
    "Oslo": ("cold", "fjords"), "Lisbon": ("warm", "tiles"), "Montreal": ("cold", "bagels"),
    "Valencia": ("warm", "paella"), "Helsinki": ("cold", "saunas"), "Brisbane": ("warm", "beaches"),
    "Edinburgh": ("cold", "castle"), "Seville": ("warm", "orange trees"), "Calgary": ("cold", "rockies"),
    "Marseille": ("warm", "harbour"),
}
EMPLOYERS = ("Northwind Labs", "Bluefin Analytics", "Quarry Systems", "Tandem Health", "Orbitly", "Paperkite",
             "Lumen Freight", "Cobalt Insurance", "Greenhouse Robotics", "Tidewater Bank")
ROLES = ("data engineer", "backend developer", "product manager", "site reliability engineer", "UX researcher")
PETS = (("dog", "puppy", "beagle"), ("dog", "puppy", "border collie"), ("cat", "kitten", "tabby"),
        ("cat", "kitten", "Maine Coon"), ("dog", "puppy", "dachshund"))
PET_NAMES = ("Miso", "Pepper", "Biscuit", "Nori", "Waffles", "Juniper", "Pixel", "Mango", "Olive", "Tofu")
DIETS = (("vegetarian", "a steakhouse dinner", "meat"), ("vegan", "a cheese fondue night", "animal products"),
         ("pescatarian", "a barbecue ribs platter", "meat other than fish"))
ALLERGIES = (("peanuts", "a satay chicken skewer with peanut sauce"), ("shellfish", "a shrimp paella"),
             ("gluten", "a plate of fresh pasta"))
LANGUAGES = (("Japanese", "Duolingo"), ("Portuguese", "Babbel"), ("Korean", "Memrise"), ("Italian", "Busuu"))
TRIPS = (("Kyoto", "the bamboo forest at dawn"), ("Iceland", "the glacier hike"), ("Morocco", "the night market"),
         ("Patagonia", "the boat ride to the ice field"), ("Vietnam", "the lantern festival in Hoi An"))
EDITORS = ("VS Code", "neovim", "Helix", "Zed", "Emacs")
PROJECTS = ("invoice-sync", "route-planner", "photo-indexer", "badge-service", "report-mailer")
SIBLINGS = (("sister", "Marta"), ("brother", "Tomas"), ("sister", "Yuki"), ("brother", "Arjun"), ("sister", "Sofia"))
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
               "November", "December")

FILLER = (
    [("user", "How do I add an index on the orders table without locking writes?"),
     ("assistant", "Use CREATE INDEX CONCURRENTLY; it takes longer but never blocks inserts.")],
    [("user", "The weather has been all over the place this week."),
     ("assistant", "Changeable weather makes planning hard. Anything coming up outdoors?")],
    [("user", "Can you suggest a quick lunch I can make in ten minutes?"),
     ("assistant", "A wrap with hummus, grated carrot and spinach is quick and filling.")],
    [("user", "Our staging deploy failed again with a timeout on the health check."),
     ("assistant", "Raise the health check's initial delay; the service needs a few seconds to warm its cache.")],
    [("user", "My neighbour's cat Luna keeps sneaking onto our balcony."),
     ("assistant", "Cats love balconies. A small planter of lavender might keep Luna away.")],
    [("user", "What is a good way to review a long pull request?"),
     ("assistant", "Read the tests first, then the public interfaces, and leave the refactors for last.")],
    [("user", "I watched a documentary about deep sea creatures last night."),
     ("assistant", "The deep sea is full of surprises. Which creature stayed with you?")],
    [("user", "Explain the difference between a mutex and a semaphore in two sentences."),
     ("assistant", "A mutex lets one holder in at a time and must be released by it. A semaphore counts permits.")],
    [("user", "Remind me how cron syntax works for every Monday at 9."),
     ("assistant", "0 9 * * 1 runs at 09:00 every Monday.")],
    [("user", "Any tips for sleeping better when it's hot?"),
     ("assistant", "Keep the room dark during the day, and a fan by an open window at night helps.")],
    [("user", "A colleague of mine is training for a marathon in Berlin."),
     ("assistant", "Berlin is a fast course. Is your colleague aiming for a particular time?")],
    [("user", "Which is faster for bulk loading, COPY or many INSERTs?"),
     ("assistant", "COPY, by a wide margin: one command streams all rows.")],
)


@dataclass(frozen=True)
class Question:
    id: str
    user_id: str
    category: str
    question: str
    evidence: tuple[tuple[str, int], ...]  # (session_id, seq) turns that answer it
    set: str = "base"  # "base", or "year" for the year set


@dataclass
class _Session:
    session_id: str
    user_id: str
    started: datetime
    turns: list[tuple[str, str]] = field(default_factory=list)

    def add(self, turns: list[tuple[str, str]]) -> list[int]:
        """Append turns; returns their seq numbers (seq starts at 1)."""
        first = len(self.turns) + 1
        self.turns.extend(turns)
        return list(range(first, first + len(turns)))

    def records(self, rng: random.Random) -> list[dict]:
        clock, out = self.started, []
        for seq, (role, text) in enumerate(self.turns, start=1):
            clock += timedelta(seconds=rng.randint(20, 200))
            out.append({"session_id": self.session_id, "user_id": self.user_id, "agent_id": "navi", "seq": seq,
                        "role": role, "content": text, "ts": clock.strftime("%Y-%m-%dT%H:%M:%SZ")})
        return out


def _month(day: date) -> str:
    return MONTH_NAMES[day.month - 1]


def _persona(rng: random.Random, index: int) -> dict:
    cities = rng.sample(sorted(CITIES), 2)
    employers = rng.sample(EMPLOYERS, 2)
    species, young, breed = rng.choice(PETS)
    diet = rng.choice(DIETS)
    return {
        "name": NAMES[index % len(NAMES)], "old_city": cities[0], "new_city": cities[1],
        "old_employer": employers[0], "new_employer": employers[1], "role": rng.choice(ROLES),
        "species": species, "young": young, "breed": breed, "pet": rng.choice(PET_NAMES),
        "diet": diet, "allergy": rng.choice(ALLERGIES), "language": rng.choice(LANGUAGES),
        "trip": rng.choice(TRIPS), "other_trip": None, "editor": rng.sample(EDITORS, 2),
        "project": rng.choice(PROJECTS), "ports": rng.sample((3000, 5000, 7070, 8080, 8443, 9090), 3),
        "sibling": rng.choice(SIBLINGS), "race_time": f"1:{rng.randint(38, 59)}:{rng.randint(10, 59)}",
    }


def _question(qs: list[Question], user: str, category: str, text: str, *evidence: tuple[str, int]) -> None:
    qs.append(Question(f"{user}-q{len(qs) + 1:03d}", user, category, text, tuple(evidence)))


def _user_story(index: int, seed: int) -> tuple[list[dict], list[Question]]:
    rng = random.Random(f"{seed}-{index}")
    p = _persona(rng, index)
    user = f"person-{index + 1:02d}"
    sessions = []
    for n in range(SESSIONS):
        day = FIRST_DAY + timedelta(days=n * DAYS_APART + rng.randint(0, 3))
        started = datetime(day.year, day.month, day.day, rng.randint(7, 20), rng.randint(0, 59), tzinfo=UTC)
        sessions.append(_Session(f"{user}-s{n + 1:02d}", user, started))
    qs: list[Question] = []

    def at(n: int, turns: list[tuple[str, str]]) -> list[tuple[str, int]]:
        s = sessions[n]
        return [(s.session_id, seq) for seq in s.add(turns)]

    def day_of(n: int) -> date:
        return sessions[n].started.date()

    # where they live, and the move (sessions 1 and 9)
    old_city = at(1, [("user", f"Here in {p['old_city']} the rent went up again this spring, it's getting silly."),
                      ("assistant", "Rising rents are stressful. Have you looked at other neighbourhoods?")])
    move = at(9, [("user", f"I finally signed the lease! From the first of next month I'll be living in "
                           f"{p['new_city']}. Leaving {p['old_city']} after six years feels strange."),
                  ("assistant", f"What a change! {p['new_city']} is known for its {CITIES[p['new_city']][1]}.")])
    climate, _ = CITIES[p["new_city"]]
    _question(qs, user, "single-hop", rng.choice(("Which city am I relocating to?", "Where is my new home going to be?")),
              move[0])
    _question(qs, user, "temporal", f"Which city did I live in back in {_month(day_of(1))}?", old_city[0], move[0])
    _question(qs, user, "open-domain", "Will I need a heavy winter coat in the place I'm moving to?"
              if climate == "cold" else "Will I mostly need light summer clothes where I'm moving?", move[0])

    # the job change (sessions 3 and 12)
    old_job = at(3, [("user", f"Long day at {p['old_employer']}, our quarterly planning ran three hours over."),
                     ("assistant", "Marathon meetings are draining. Did anything good come out of it?")])
    new_job = at(12, [("user", f"Today was my last day at {p['old_employer']}. On Monday I start as a {p['role']} "
                               f"at {p['new_employer']}!"),
                      ("assistant", f"Congratulations on the new role at {p['new_employer']}!")])
    _question(qs, user, "single-hop", rng.choice(("Which company did I join recently?",
                                                  "Who is my new employer?")), new_job[0])
    _question(qs, user, "multi-hop", "Which company was I working for before my current job, and what is my new "
              "job title?", old_job[0], new_job[0])

    # the pet (sessions 2 and 14)
    adopt = at(2, [("user", f"Big news: we brought home a little {p['breed']} {p['young']} on Saturday. The kids "
                            f"named her {p['pet']}."),
                   ("assistant", f"{p['pet']} is a lovely name! The first weeks with a {p['young']} are a lot of "
                                 "fun and very little sleep.")])
    vet = at(14, [("user", f"{p['pet']} had her vaccinations this morning and was very brave about it."),
                  ("assistant", "Good girl! Maybe a treat for being so brave.")])
    _question(qs, user, "single-hop", rng.choice((f"What is my {p['species']} called?",
                                                  f"What name did we give our {p['species']}?")), adopt[0])
    _question(qs, user, "temporal", f"When did we get our {p['species']}?", adopt[0])
    _question(qs, user, "multi-hop", f"What kind of {p['species']} went to the vet for her shots?", adopt[0], vet[0])
    _question(qs, user, "adversarial", f"What is the name of my {'cat' if p['species'] == 'dog' else 'dog'}?",
              adopt[0])

    # diet and allergy (sessions 4 and 7)
    diet, tempting, avoided = p["diet"]
    food = at(4, [("user", f"Please no recipes with {avoided} for me, I've been {diet} for about five years."),
                  ("assistant", f"Understood, {diet} recipes only from now on.")])
    allergen, dish = p["allergy"]
    allergy = at(7, [("user", f"Careful with suggestions, I have a serious allergy to {allergen}."),
                     ("assistant", f"Thanks for telling me, I'll leave {allergen} out of every suggestion.")])
    _question(qs, user, "open-domain", f"Would {tempting} be a good birthday treat for me?", food[0])
    _question(qs, user, "open-domain", f"Is {dish} safe for me to order?", allergy[0])
    _question(qs, user, "single-hop", "What eating habit have I kept for years?", food[0])

    # the race (session 6), dated
    race = at(6, [("user", f"I ran the {p['old_city']} half marathon this morning, finished in {p['race_time']}!"),
                  ("assistant", "That's a great time! How are your legs feeling?"),
                  ("user", "Sore, but happy. The last three kilometres were uphill."),
                  ("assistant", "Uphill at the end is brutal. Rest well and stretch.")])
    _question(qs, user, "temporal", "When did I run the half marathon?", race[0])
    _question(qs, user, "single-hop", "How long did the half marathon take me?", race[0])
    _question(qs, user, "adversarial", "What was my time in the Berlin marathon?", race[0])

    # the language (sessions 5 and 15)
    language, app = p["language"]
    lang1 = at(5, [("user", f"I started learning {language} with {app}, fifteen minutes every morning."),
                   ("assistant", f"Daily practice is the way. Why {language}?")])
    lang2 = at(15, [("user", f"My {language} tutor says my pronunciation has really improved."),
                    ("assistant", "That's encouraging, the morning routine is paying off.")])
    _question(qs, user, "single-hop", "Which app do I practise my new language with?", lang1[0])
    _question(qs, user, "multi-hop", "Which app did I first use for the language my tutor now praises me in?",
              lang1[0], lang2[0])

    # the trip (planned in session 8, told in session 13)
    place, highlight = p["trip"]
    plan = at(8, [("user", f"We're planning a trip to {place} later this year, booking flights this weekend."),
                  ("assistant", f"{place} sounds wonderful. How long will you stay?")])
    back = at(13, [("user", f"Back from {place}! Honestly {highlight} was the best part."),
                   ("assistant", "It sounds unforgettable. Welcome back!")])
    _question(qs, user, "temporal", f"Where did I travel in {_month(day_of(13))}?", back[0])
    _question(qs, user, "multi-hop", "What did I enjoy most on the trip I was planning earlier in the year?",
              plan[0], back[0])
    other = next(t for t, _ in TRIPS if t != place)
    _question(qs, user, "adversarial", f"What did I like best about my trip to {other}?", plan[0], back[0])

    # the sibling's wedding (session 10)
    relation, sibling = p["sibling"]
    wedding_month = _month(day_of(16))
    wedding = at(10, [("user", f"My {relation} {sibling} is getting married in {wedding_month}, I'm giving a speech."),
                      ("assistant", "What an honour! Want help drafting the speech?")])
    speech = at(16, [("user", f"The speech at {sibling}'s wedding went well, people laughed at the right moments."),
                     ("assistant", "That's the best outcome for a wedding speech!")])
    _question(qs, user, "single-hop", "Who in my family got married?", wedding[0])
    _question(qs, user, "temporal", f"What family celebration happened in {wedding_month}?", wedding[0], speech[0])
    _question(qs, user, "adversarial", f"What is my {'brother' if relation == 'sister' else 'sister'}'s name?",
              wedding[0])

    # the service and its ports (sessions 11 and 17)
    first_port, second_port, _ = p["ports"]
    port1 = at(11, [("user", f"Let's run {p['project']} on port {first_port} from now on."),
                    ("assistant", f"Agreed: {p['project']} listens on port {first_port}. I updated config.toml.")])
    port2 = at(17, [("user", f"Port {first_port} clashes with the proxy, switch {p['project']} to port {second_port} "
                             "from now on."),
                    ("assistant", f"Done: {p['project']} now uses port {second_port}.")])
    _question(qs, user, "single-hop", f"Which port is {p['project']} on at the moment?", port2[0])
    _question(qs, user, "multi-hop", f"Which ports has {p['project']} used so far?", port1[0], port2[0])
    _question(qs, user, "temporal", f"What port did {p['project']} use before the proxy clash?", port1[0], port2[0])

    # the editor and how answers should look (sessions 18 and 0)
    old_editor, editor = p["editor"]
    edit = at(18, [("user", f"I moved from {old_editor} to {editor} last week, everything feels snappier."),
                   ("assistant", f"{editor} is a nice choice. Want me to tailor shortcuts to it?")])
    style = at(0, [("user", "Please keep answers short, bullet points work best for me."),
                   ("assistant", "Got it: short answers, in bullet points.")])
    _question(qs, user, "single-hop", "Which code editor am I using these days?", edit[0])
    _question(qs, user, "open-domain", "How should you format explanations when you answer me?", style[0])
    _question(qs, user, "temporal", f"What editor did I switch to in {_month(day_of(18))}?", edit[0])

    # where they live now and the weather there (session 19)
    weather = at(19, [("user", f"First {('snow' if climate == 'cold' else 'heatwave')} of the season here in "
                               f"{p['new_city']}."),
                      ("assistant", "Take care out there!")])
    _question(qs, user, "multi-hop", "What weather did I get in the first season after my move?", move[0], weather[0])
    _question(qs, user, "adversarial", "Which university did I study at?", old_job[0], new_job[0])

    # every session also has small talk and technical questions, some sharing the story's words
    for n, session in enumerate(sessions):
        greeting = [("user", rng.choice(("hi!", "hello", "good morning"))),
                    ("assistant", f"Hello {p['name']}! What's on your mind?")]
        fillers = rng.sample(FILLER, 2)
        session.turns = greeting + fillers[0] + session.turns + fillers[1]
        shift = len(greeting) + len(fillers[0])
        qs = [replace_evidence(q, session.session_id, shift) for q in qs]
    records = [r for s in sessions for r in s.records(rng)]
    return records, qs


def replace_evidence(q: Question, session_id: str, shift: int) -> Question:
    """The question with its evidence in `session_id` moved by `shift` seqs (turns inserted before)."""
    return Question(q.id, q.user_id, q.category, q.question,
                    tuple((s, seq + shift if s == session_id else seq) for s, seq in q.evidence), q.set)


@dataclass(frozen=True)
class EvidenceSet:
    transcripts: Path
    questions: Path
    users: int
    messages: int
    by_category: dict[str, int]
    by_set: dict[str, int]


def write_evidence_set(out: Path, users: int = 12, seed: int = 0, year_users: int = 7) -> EvidenceSet:
    """Transcripts (one JSON Lines file per user, base users then year users) and
    `questions.json`, the same bytes for the same arguments."""
    from memory_pipelines.bench.year_set import year_story  # it builds on this module's Question and _Session

    if users < 1 or year_users < 0:
        raise ValueError("users must be at least 1 and year_users at least 0")
    transcripts = out / "transcripts"
    transcripts.mkdir(parents=True, exist_ok=True)
    questions: list[Question] = []
    messages = 0
    stories = [_user_story(index, seed) for index in range(users)]
    for records, qs in stories + [year_story(index, seed) for index in range(year_users)]:
        (transcripts / f"{records[0]['user_id']}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records), encoding="utf-8")
        questions.extend(qs)
        messages += len(records)
    path = out / "questions.json"
    path.write_text(json.dumps([asdict(q) for q in questions], indent=1, ensure_ascii=False), encoding="utf-8")
    counts = {c: sum(q.category == c for q in questions) for c in CATEGORIES}
    sets = {s: sum(q.set == s for q in questions) for s in ("base", "year")}
    return EvidenceSet(transcripts, path, users + year_users, messages, counts, sets)


def load_questions(path: Path) -> list[Question]:
    return [Question(q["id"], q["user_id"], q["category"], q["question"], tuple(tuple(e) for e in q["evidence"]),
                     q.get("set", "base"))
            for q in json.loads(path.read_text(encoding="utf-8"))]
