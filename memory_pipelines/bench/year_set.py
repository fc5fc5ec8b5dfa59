"""The harder half of the labelled retrieval set, written for this project (invented here,
never copied from any public benchmark): a year of chats between each of seven users and
a chatty friend, and questions whose evidence is scattered across it.

Every user talks to the friend in 26 sessions two weeks apart from 2025-11-03; session n of
every user falls on the same calendar day (at different hours), so the set spans 26 days.
A session is 10-20 turns of greetings, echoes ("haha nice!"), small talk, technical
questions and the friend's own life ("I love climbing too", "my sister just moved"), which
reads like the user's self statements. The user's facts are said in passing, often inside a
turn about something else, and never restated; the user's life moves on (a hobby taken up in
December shown in June, an injury healing, a job hunt, a partner, a renovation, a changing
favourite). Questions come in two categories:

- spread: the user turns of two to four different sessions together answer it;
- person: two or more scattered self statements answer it, often by inference
  ("would I enjoy a silent retreat?" from "I can't sit through a whole film ...").
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

from memory_pipelines.bench.evidence_set import Question, _Session

FIRST_DAY = date(2025, 11, 3)
SESSIONS = 26
DAYS_APART = 14
STORY_PER_SESSION = 4  # story beats (two turns each) a session holds at most

NAMES = ("Maren", "Teo", "Ada", "Kofi", "Lucia", "Ravi", "Signe", "Walt", "Yara")
FRIENDS = ("Sam", "Robin", "Noor", "Kit", "Jules", "Remy", "Tess")
NEW_HOBBIES = (  # (start in December, progress in March, milestone in June)
    ("I signed up for a pottery course at the studio on Fenner Street, first class is Thursday",
     "my teacher finally let me loose on the wheel, three wonky bowls so far",
     "two of my mugs got picked for the studio's summer exhibit, opening night is Friday"),
    ("I enrolled in an evening joinery class, we start by making a dovetailed box",
     "the dovetailed box is glued up and only slightly crooked",
     "I sold my first walnut cutting board at the craft fair on Saturday"),
    ("I bought a tiny travel paint set and started doing watercolours on Sunday mornings",
     "I did a whole page of grey skies this week, learning to let the paint bleed",
     "the library café is hanging six of my watercolours on its wall this month"),
    ("a neighbour gave me a jar of starter so I'm a sourdough baker now apparently",
     "my loaves finally have an open crumb instead of being bricks",
     "my rye loaf won second prize at the village bake-off"),
    ("I joined a community choir, rehearsals are Wednesday nights in a church hall",
     "the director moved me from the altos to the tenors, which was a surprise",
     "we sang our first concert in the cathedral and I didn't miss a single entry"),
    ("I started a bookbinding workshop, learning to sew the pages together by hand",
     "I've bound three notebooks now, the linen covers are my favourite",
     "the stationery shop in town took ten of my notebooks to sell"),
)
OLD_HOBBIES = ("I've knitted all my own socks since university", "I've been birdwatching on the marshes for years",
               "I've played bass in a pub covers band for ten years", "I've grown chillies on the balcony for ages",
               "I've done 2000-piece jigsaws since I was a kid", "I've been restoring old bicycles in the shed for years",
               "I've swum in the sea all year round since my twenties")
PARTS = ("knee", "ankle", "calf", "hamstring", "shoulder", "wrist")
SPORTS = (("running", "on a hill run", "the harbour 10k"), ("climbing", "falling off a boulder problem",
          "a full day at the outdoor crag"), ("tennis", "lunging for a drop shot", "the club doubles tournament"),
          ("football", "in a five-a-side tackle", "the charity match"), ("rowing", "slipping on the pontoon",
          "the river regatta"))
OLD_JOBS = ("bookkeeper at a dental chain", "junior architect", "warehouse shift lead", "pharmacy technician",
            "events coordinator", "school librarian", "bank teller")
NEW_JOBS = ("data analyst", "UX designer", "logistics planner", "clinical researcher", "project manager", "archivist",
            "product owner")
COMPANIES = ("Harbourline", "Quillstone", "Fernway Health", "Brightmoor", "Copperleaf", "Tallyhaus", "Ninefold")
CITIES = ("Rotterdam", "Lyon", "Gdansk", "Leeds", "Bilbao", "Tallinn", "Graz", "Aarhus", "Turin", "Porto")
TOWNS = ("Kestrel Point", "Alderbrook", "Millhaven", "Saltmarsh", "Fenwick Bay", "Oakhythe", "Dunmore")
WINTER_COMMUTES = ("the 7:40 ferry from {town} was cancelled", "the 8:05 bus from {town} got stuck behind a gritter",
                   "the train from {town} was replaced by a coach again", "the car park at {town} station was iced over")
SUMMER_COMMUTES = ("I cycle in along the canal now that it's light out", "I've been rollerblading in along the seafront",
                   "I walk in through the park these days, forty minutes door to door",
                   "I paddle across the bay on a borrowed kayak some mornings, then change at the office")
PARTNERS = ("Ilse", "Marco", "Juno", "Felix", "Anouk", "Dario", "Wren", "Tobias")
ROOMS = ("kitchen", "bathroom", "loft", "utility room", "downstairs loo")
FINISHES = ("terracotta", "sage green", "black slate", "speckled terrazzo", "hexagonal white")
FAVOURITES = (("coffee order", "oat flat white", "iced cortado", "cardamom latte", "double espresso"),
              ("comfort food", "ramen", "mac and cheese", "pho", "shakshuka"),
              ("board game", "Catan", "Wingspan", "Azul", "Codenames"),
              ("snack", "salted almonds", "rice crackers", "dark chocolate", "dried mango"))
RELATIVES = ("sister", "brother", "cousin")
RELATIVE_NAMES = ("Mira", "Jonah", "Elsa", "Bram", "Lotte", "Cas", "Hanne")
RELATIVE_REASONS = ("a nursing job", "a PhD place", "a bakery apprenticeship", "a job on the ferries")

PERSON = (  # (questions, whether a quiet temperament picks the option, options of >= 2 self statements)
    (("Would I enjoy a week at a silent meditation retreat?", "Is seven days of not talking a good idea for me?"),
     True, (("the best part of my week is the hour before anyone else wakes up, just tea and quiet",
             "I've been doing ten minutes of breathing exercises before bed and I sleep so much better"),
            ("I can't sit through a whole film without checking my phone",
             "I go a bit stir-crazy if I haven't chatted with someone by lunchtime"))),
    (("What sort of weekend do I like?", "How would I want to spend a free Saturday and Sunday?"),
     True, (("my ideal Sunday is not leaving the house, pyjamas and a film marathon",
             "big parties wear me out for days afterwards"),
            ("I'm always the one organising the barbecue on Saturdays",
             "I get restless if there's nothing planned after Friday"))),
    (("Would a packed three-day music festival be fun for me?", "Should I get tickets for the big summer festival?"),
     True, (("I left the Christmas market after ten minutes, far too many people", "loud music gives me a headache"),
            ("the best night of my year was dancing in a field till 3am", "I love being in a crowd singing along"))),
    (("What might I study if I went back to school?", "If I took a degree next year, what subject would fit?"),
     False, (("I lost a whole evening reading about how medieval cathedrals were built",
              "I always end up photographing old doorways and arches on holiday"),
             ("I've been identifying every mushroom on my walks with a field guide",
              "my windowsill is full of seedlings I'm tracking in a notebook"),
             ("I got weirdly excited reading about the crash of 1929",
              "I track every euro I spend in a spreadsheet with charts"),
             ("I watched three documentaries on octopus intelligence this week",
              "I volunteer at the aquarium touch pool some Saturdays"))),
    (("What kind of present would suit me?", "What should someone buy me for my birthday?"),
     False, (("I drink about five cups of loose-leaf tea a day",
              "my favourite thing on a cold evening is a thick novel under a blanket"),
             ("my old headphones finally died", "I listen to podcasts on every single walk"),
             ("I collect enamel pins from every place I visit", "my denim jacket is covered in them at this point"))),
    (("Am I an early bird or a night owl?", "Should I book the 6am spin class or the late yoga session?"),
     False, (("I'm useless before ten, don't talk to me before coffee",
              "my best ideas come after midnight when the street is quiet"),
             ("I'm up at half five without an alarm most days",
              "by nine in the evening I'm yawning through whatever we're watching"))),
    (("Where should we take me for a birthday dinner?", "What kind of restaurant would I pick for a celebration?"),
     False, (("I stopped eating meat last spring", "the hotter the chilli the happier I am"),
             ("I'm allergic to shellfish, found out the hard way", "I could eat fresh pasta every single day"),
             ("even black pepper is too spicy for me", "I love a long slow tasting menu with lots of little plates"))),
    (("What kind of pet would fit my life?", "Would a dog be a sensible addition for me right now?"),
     False, (("I'm away most weekends visiting friends", "I'm out of the house eleven hours a day with the commute"),
             ("I go stir-crazy without a reason to get outside",
              "the fields behind our place are perfect for long walks"))),
    (("Would a job with constant travel suit me?", "Should I take a role that's on the road three weeks a month?"),
     False, (("I hate flying, I grip the armrest the whole time", "after two nights away I miss my own bed terribly"),
             ("I get itchy feet if I stay in one place for a month",
              "I can sleep anywhere, planes, trains, airport benches"))),
    (("What kind of holiday would suit me best?", "Beach week or ski week, which would I prefer?"),
     False, (("heat gives me a headache once it's over 25 degrees",
              "I'd happily spend every winter weekend in the snow"),
             ("I'm freezing all the time, I wear two jumpers indoors",
              "I could lie by the sea with a book for a fortnight"))),
    (("Would a lecture course or a hands-on workshop work better for me?", "How do I pick up new skills best?"),
     False, (("manuals put me to sleep, I just start pressing buttons",
              "I only understood fractions when my grandad made me cut up a cake"),
             ("I read the whole manual before I even open the box", "I take notes on everything, even podcasts"))),
    (("On a Friday night, am I more likely to cook or order in?", "Would a cookbook be wasted on me?"),
     False, (("I burn toast, literally, the smoke alarm knows me by name", "takeaway menus are my recipe books"),
             ("I make fresh pasta from scratch most Sundays", "my friends call my kitchen the canteen"))),
)

PIVOTS = (  # something else the same turn is about, and the friend's answer
    ("about that spreadsheet, how do I freeze the top row?", "View, then Freeze, then 1 row. Done!"),
    ("what's the shortcut to paste without formatting?", "Ctrl+Shift+V in most apps, Cmd+Shift+Option+V on a Mac."),
    ("how do I undo my last git commit but keep the changes?", "git reset --soft HEAD~1 keeps them staged."),
    ("why does my laptop fan go crazy on video calls?", "Video encoding is heavy, try turning off background blur."),
    ("how do I make a bulleted list in a shared doc?", "Type a dash and a space, or Ctrl+Shift+8."),
    ("what's a polite way to turn down a meeting?", "Something like: I can't make this one, could you share notes?"),
    ("is it normal for the wifi to drop every evening?", "Often it's the neighbours on the same channel, try 5 GHz."),
    ("how long do I boil an egg for a runny yolk?", "Six minutes from the boil, then straight into cold water."),
    ("how do I turn a PDF into an editable document?", "Open it in a word processor, it converts, tables may shift."),
    ("what does a 502 error mean on our intranet?", "The gateway got no good answer from the server behind it."),
)
SMALL_TALK = (
    ("what are you up to today?", "Not much, catching up on messages and pretending to tidy. You?"),
    ("did you hear that storm last night?", "The thunder was wild! I counted the seconds like a kid."),
    ("it's so grey out, I need sunshine", "Same. Some days the sky just refuses."),
    ("any good shows lately?", "I've been rewatching an old detective series, very comforting."),
    ("long day, brain is mush", "Sounds like a sofa evening. Be kind to yourself."),
    ("happy friday!!", "Happy Friday! Any plans?"),
    ("the neighbours are drilling again", "Noise-cancelling headphones and patience, my friend."),
    ("I just saw a dog in a raincoat", "Peak joy. Was it a yellow one?"),
)
FRIEND_NEWS = (  # the friend's own life, phrased like a user's self statements
    "my sister just moved to {city}, so I'll visit a lot", "my {part} has been sore since I went {sport} last week",
    "I started a new job in {city} two years ago and the first week was a blur",
    "my favourite {fav} is {choice}, no contest", "I'm planning a trip to {city} in the spring",
    "I'm a total night owl, my best ideas come at 2am", "I'd pick a quiet cabin over a festival any day",
    "I walk to work along the river most days", "I've been baking sourdough every weekend",
    "my brother is renovating his {room} and sends me photos of every tile",
)
FRIEND_TOO = ("I love {sport} too, I did a taster session last spring", "I've been meaning to take up pottery myself",
              "my partner and I are redoing our {room} as well", "I got engaged on a beach, so I'm a sucker for that",
              "I had the same with my {part} last year", "I'm the same, my favourite {fav} changes every month")
ASKS = (("how was your weekend?", "Pretty good!"), ("what's new with you?", "Oh, lots."),
        ("how are things on your side?", "Busy, but good."))
GREETINGS = ("hey {friend}!", "morning!", "hiya", "hey hey", "hi, got a minute?", "evening {friend}")
HELLOS = ("Hey {name}! How's things?", "Hi {name}! What's new?", "{name}! Good to hear from you.")
CLOSINGS = (("ok gotta run, talk soon", "Bye! Talk soon."), ("thanks, you're the best", "Anytime!"),
            ("right, back to work", "Go get 'em!"), ("night!", "Sleep well!"))
INTROS = ("", "ok so ", "random but ", "ugh, ", "oh and ", "side note: ", "so yeah, ")
ECHOES = ("Haha nice!", "That's great to hear.", "Oh wow, tell me more!", "Ha, classic.", "Ooh!", "No way!")
USER_ECHOES = ("haha nice!", "that's great to hear", "oh fun", "no way", "sounds lovely", "ha, of course you do")


def _persona(rng: random.Random, index: int) -> dict:
    favourite = rng.choice(FAVOURITES)
    return {
        "name": NAMES[index % len(NAMES)], "friend": FRIENDS[index % len(FRIENDS)], "quiet": rng.random() < 0.5,
        "hobby": rng.choice(NEW_HOBBIES), "old_hobby": rng.choice(OLD_HOBBIES), "part": rng.choice(PARTS),
        "sport": rng.choice(SPORTS), "old_job": rng.choice(OLD_JOBS), "new_job": rng.choice(NEW_JOBS),
        "company": rng.choice(COMPANIES), "cities": rng.sample(CITIES, 4), "town": rng.choice(TOWNS),
        "commute": (rng.choice(WINTER_COMMUTES), rng.choice(SUMMER_COMMUTES)), "partner": rng.choice(PARTNERS),
        "room": rng.choice(ROOMS), "finish": rng.choice(FINISHES),
        "favourite": (favourite[0], *rng.sample(favourite[1:], 2)), "relative": rng.choice(RELATIVES),
        "relative_name": rng.choice(RELATIVE_NAMES), "relative_reason": rng.choice(RELATIVE_REASONS),
    }


def tell_year(p: dict, rng: random.Random) -> tuple[list[tuple[int, str, str]], list[tuple[str, tuple[str, ...]]]]:
    """The user's year as (session, key, self statement) beats, and the spread questions
    over them as (question, keys of the beats that answer it)."""
    start, progress, milestone = p["hobby"]
    sport, how, event = p["sport"]
    part, company, partner, room = p["part"], p["company"], p["partner"], p["room"]
    work, relative_city = p["cities"][:3], p["cities"][3]
    winter, summer = p["commute"]
    kind, before, after = p["favourite"]
    relative = f"{p['relative']} {p['relative_name']}"
    beats = [
        (0, "old-hobby", p["old_hobby"]), (3, "hobby-1", start), (9, "hobby-2", progress), (15, "hobby-3", milestone),
        (1, "hurt-1", f"I hurt my {part} {how} on Tuesday, hobbling around like a pirate"),
        (4, "hurt-2", f"the physio says no {sport} for six weeks, just resistance band work for the {part}"),
        (10, "hurt-3", f"back to {sport} at last, forty minutes and not a twinge"),
        (17, "hurt-4", f"did {event} on Sunday and the {part} held up the whole way"),
        (2, "job-1", f"I'm so done being a {p['old_job']}, applying for {p['new_job']} roles now"),
        (6, "job-2", f"two interviews this week, the one at {company} had a whiteboard task that went okay-ish"),
        (11, "job-3", f"{company} rang, they're offering me the {p['new_job']} position!!"),
        (14, "job-4", f"survived my first week at {company}, my desk is right next to the coffee machine, dangerous"),
        (16, "city-1", f"writing this from a hotel in {work[0]}, the client workshop runs all week"),
        (20, "city-2", f"the train to {work[1]} for the supplier audit was four hours late"),
        (23, "city-3", f"back from the {work[2]} office, their canteen puts ours to shame"),
        (5, "commute-1", "late again, " + winter.format(town=p["town"])), (19, "commute-2", summer),
        (1, "partner-1", f"{partner} and I had our third date at the night market, I think it's going somewhere"),
        (8, "partner-2", f"{partner} met my parents on Sunday, mum got the baby photos out"),
        (13, "partner-3", f"{partner} carried the last boxes into my place at the weekend, we officially live together"),
        (22, "partner-4", f"{partner} proposed on the pier at sunset and I said yes!!"),
        (7, "room-1", f"the builders ripped out the old {room} today, there's dust in places dust should never be"),
        (12, "room-2", f"we chose {p['finish']} tiles for the {room} floor after two hours in the showroom"),
        (18, "room-3", f"the plumber pushed us back three weeks so the {room} is still a building site"),
        (24, "room-4", f"the {room} is finally finished and I keep wandering in just to admire it"),
        (4, "favourite-1", f"my go-to {kind} right now is {before}, can't get enough"),
        (19, "favourite-2", f"I've gone right off {before}, it's all {after} for me lately"),
        (9, "relative-1", f"my {relative} just moved to {relative_city} for {p['relative_reason']}"),
        (21, "relative-2", f"off to {relative_city} on Friday for {p['relative_name']}'s housewarming"),
    ]
    questions = [
        (rng.choice(("How far did I get with the thing I picked up in December?",
                     "What came of the pastime I started before Christmas?")), ("hobby-1", "hobby-2", "hobby-3")),
        (rng.choice(("What do my two hobbies have in common?", "How are my old pastime and my new one alike?")),
         ("old-hobby", "hobby-1")),
        (rng.choice((f"How did my {part} recover over the year?", f"What was the story of my {part} injury?")),
         ("hurt-1", "hurt-2", "hurt-3", "hurt-4")),
        (f"What helped me return to {sport} after the injury?", ("hurt-2", "hurt-3")),
        (rng.choice(("How did my job search turn out?", "Where did all those applications lead in the end?")),
         ("job-1", "job-2", "job-3")),
        ("How long was it from my first applications to starting the new job?", ("job-1", "job-4")),
        (rng.choice(("Which cities did I visit for work?", "Where has the new job sent me so far?")),
         ("city-1", "city-2", "city-3")),
        (rng.choice(("What changed about my commute between winter and summer?",
                     "How did my way of getting to work change once the days got longer?")),
         ("commute-1", "commute-2")),
        (rng.choice((f"How did things with {partner} develop this year?",
                     "How did my relationship move along over the months?")), ("partner-1", "partner-3", "partner-4")),
        ("Who am I marrying, and how long had we been seeing each other?", ("partner-1", "partner-4")),
        (rng.choice(("In what order did the work on my home get done?",
                     "What were the stages of the building work at my place?")),
         ("room-1", "room-2", "room-3", "room-4")),
        (f"What held up the {room}, and when was it done in the end?", ("room-3", "room-4")),
        (f"Has my favourite {kind} changed since the winter?", ("favourite-1", "favourite-2")),
        (f"Who lives in {relative_city} now, and why did I go there?", ("relative-1", "relative-2")),
    ]
    return beats, questions


def place_person(p: dict, rng: random.Random, beats: list[tuple[int, str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """Adds the self statements behind each person question to `beats`, in different sessions
    with room left; returns the person questions as (question, keys)."""
    load = [sum(n == session for n, _, _ in beats) for session in range(SESSIONS)]
    questions = []
    for number, (texts, by_temperament, options) in enumerate(PERSON):
        statements = options[0 if p["quiet"] else 1] if by_temperament else rng.choice(options)
        free = [n for n in range(SESSIONS) if load[n] < STORY_PER_SESSION]
        keys = []
        for part, (session, statement) in enumerate(zip(sorted(rng.sample(free, len(statements))), statements)):
            load[session] += 1
            keys.append(f"person-{number}-{part}")
            beats.append((session, keys[-1], statement))
        questions.append((rng.choice(texts), tuple(keys)))
    return questions


def deal(rng: random.Random) -> dict[str, list]:
    """One session's draws, so nothing repeats within it: pivots, small talk, the friend's
    lines and the kinds of filler (twice each of talk, tech, news, ask)."""
    decks = {"pivot": PIVOTS, "talk": SMALL_TALK, "news": FRIEND_NEWS, "too": FRIEND_TOO, "ask": ASKS}
    return {"kind": rng.sample(("talk", "tech", "news", "ask") * 2, 8),
            **{name: rng.sample(pool, len(pool)) for name, pool in decks.items()}}


def friend_says(rng: random.Random, template: str, capital: bool = True) -> str:
    """A sentence of the friend's own life, with details that could be the user's."""
    favourite = rng.choice(FAVOURITES)
    line = template.format(sport=rng.choice(SPORTS)[0], city=rng.choice(CITIES), part=rng.choice(PARTS),
                           fav=favourite[0], choice=rng.choice(favourite[1:]), room=rng.choice(ROOMS))
    return f"{line[0].upper() if capital else line[0]}{line[1:]}."


def say_in_passing(rng: random.Random, deck: dict[str, list], statement: str) -> list[tuple[str, str]]:
    """A self statement inside a turn about something else, or tossed off and echoed back."""
    style = rng.randrange(3)
    if style == 0:
        question, answer = deck["pivot"].pop()
        return [("user", f"{rng.choice(INTROS)}{statement} — anyway, {question}"), ("assistant", answer)]
    if style == 1:
        question, answer = deck["pivot"].pop()
        return [("user", f"{question[0].upper()}{question[1:]} (also {statement}, long story)"),
                ("assistant", f"{answer} {rng.choice(ECHOES)}")]
    return [("user", f"{rng.choice(INTROS)}{statement}"),
            ("assistant", f"{rng.choice(ECHOES)} {friend_says(rng, deck['too'].pop())}")]


def filler(rng: random.Random, deck: dict[str, list]) -> list[tuple[str, str]]:
    """Two turns of small talk, a technical question, the friend's news, or the user asking after it."""
    kind = deck["kind"].pop()
    if kind == "talk":
        return list(zip(("user", "assistant"), deck["talk"].pop()))
    if kind == "tech":
        question, answer = deck["pivot"].pop()
        return [("user", f"{question[0].upper()}{question[1:]}"), ("assistant", answer)]
    if kind == "ask":
        question, opener = deck["ask"].pop()
        return [("user", question), ("assistant", f"{opener} {friend_says(rng, deck['news'].pop())}")]
    news = friend_says(rng, deck["news"].pop(), capital=False)
    return [("assistant", rng.choice(("Oh, news from me: ", "Random update: ", "Guess what, ")) + news),
            ("user", rng.choice(USER_ECHOES))]


def year_story(index: int, seed: int) -> tuple[list[dict], list[Question]]:
    """One year user's transcript records and questions, the same for the same arguments."""
    rng = random.Random(f"year-{seed}-{index}")
    p = _persona(rng, index)
    user = f"year-{index + 1:02d}"
    beats, spread = tell_year(p, rng)
    person = place_person(p, rng, beats)
    hour = 8 + 2 * (index % 7)  # every user's session n is on the same day, at its own hour
    where: dict[str, tuple[str, int]] = {}
    records: list[dict] = []
    for n in range(SESSIONS):
        day = FIRST_DAY + timedelta(days=n * DAYS_APART)
        session = _Session(f"{user}-s{n + 1:02d}", user, datetime(day.year, day.month, day.day, hour,
                                                                   rng.randint(0, 59), tzinfo=UTC))
        deck = deal(rng)
        blocks = [(key, say_in_passing(rng, deck, statement)) for at, key, statement in beats if at == n]
        size, target = 4 + 2 * len(blocks), rng.randint(10, 20)
        while size + 2 <= target:
            blocks.append(("", filler(rng, deck)))
            size += 2
        rng.shuffle(blocks)
        session.add([("user", rng.choice(GREETINGS).format(friend=p["friend"])),
                     ("assistant", rng.choice(HELLOS).format(name=p["name"]))])
        for key, turns in blocks:
            seqs = session.add(turns)
            if key:
                where[key] = (session.session_id, seqs[0])
        session.add(list(zip(("user", "assistant"), rng.choice(CLOSINGS))))
        records.extend(session.records(rng))
    questions = [Question(f"{user}-q{number:03d}", user, category, text, tuple(where[k] for k in keys), "year")
                 for number, (category, text, keys) in enumerate(
                     [("spread", t, k) for t, k in spread] + [("person", t, k) for t, k in person], start=1)]
    return records, questions
