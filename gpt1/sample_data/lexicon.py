"""The lexicon of the offline sample data: which words exist, what they mean, and which half each task may train on.

Meaning lives in three word properties, each taught by the generated books and tested by the generated tasks (the
design, and why every task reads exactly one property, is in `gpt1.sample_data`):

* polarity: adjectives that are positive or negative (`POSITIVE`, `NEGATIVE`);
* kind: nouns that name an animal (a bird or a fish) or a plant (a tree or a flower) (`CATEGORIES`, `KINDS`);
* subcategorisation: verbs that never take an object (`INTRANSITIVE`) and verbs that always do (`TRANSITIVE`).

Every list is split the same fixed way, independent of the seed: items at even positions are the *train* half,
items at odd positions the *eval* half (`halves`). Task train splits draw meaning-bearing words only from the
train half; dev and test splits only from the eval half. The books use both halves alike.

The lexicon is small on purpose: the smoke preset's model (3 layers, 128 wide) pre-trains for a few minutes on a
CPU, and how well it learns each word depends on how often it sees it (measured: with 24 adjectives per polarity
and 80 nouns in ten categories it needed 2,400 updates to place held-out words by meaning; with this size, under a
thousand).
"""

from __future__ import annotations

from dataclasses import dataclass

FEMALE_NAMES = (
    "Anna",
    "Mia",
    "Clara",
    "Lucy",
    "Emma",
    "Nora",
    "Alice",
    "Kate",
    "Martha",
    "Ruth",
    "Jane",
    "Ella",
    "Molly",
    "Edith",
    "Hannah",
    "Amy",
    "Susan",
    "Beth",
    "Eva",
    "Laura",
)
MALE_NAMES = (
    "Tom",
    "Ben",
    "Hugh",
    "Peter",
    "Sam",
    "Oliver",
    "Henry",
    "Ned",
    "James",
    "Paul",
    "Fred",
    "Walter",
    "Arthur",
    "George",
    "Leo",
    "Harry",
    "Dan",
    "Carl",
    "Simon",
    "Owen",
)
VILLAGES = (
    "Dunmore",
    "Hartwell",
    "Kingsbury",
    "Thornbury",
    "Marlow",
    "Selby",
    "Caldwell",
    "Penrith",
    "Wyndham",
    "Brackley",
    "Ambleside",
    "Greyhaven",
)
# Where and when things happen; none of these words is in a meaning-bearing list.
PLACES = (
    "by the river",
    "in the garden",
    "at the market",
    "near the mill",
    "in the square",
    "behind the barn",
    "beside the pond",
    "on the bridge",
    "by the well",
    "at the edge of the lake",
    "in the orchard",
    "near the church",
    "in the yard",
    "on the riverbank",
    "by the old wall",
)
TIMES = (
    "at dawn",
    "in the morning",
    "at noon",
    "in the afternoon",
    "in the evening",
    "after supper",
    "on Sunday",
    "one spring morning",
    "late that night",
    "the next day",
    "on a winter afternoon",
    "before breakfast",
    "that summer",
    "at sunset",
)
PEOPLE = (
    "a man",
    "a woman",
    "a boy",
    "a girl",
    "an old man",
    "a young woman",
    "a farmer",
    "a child",
    "a fisherman",
    "a baker",
    "a teacher",
    "a sailor",
)

# ---------------------------------------------------------------------------------------------------- polarity
POSITIVE = (
    "wonderful",
    "delightful",
    "charming",
    "lovely",
    "splendid",
    "pleasant",
    "cheerful",
    "brilliant",
    "marvelous",
    "superb",
    "excellent",
    "glorious",
    "merry",
    "elegant",
    "perfect",
    "jolly",
)
NEGATIVE = (
    "dreadful",
    "awful",
    "terrible",
    "horrid",
    "gloomy",
    "wretched",
    "dismal",
    "miserable",
    "hideous",
    "nasty",
    "dull",
    "ghastly",
    "rotten",
    "bleak",
    "shabby",
    "tedious",
)
# How people react to something good or bad; `{his}` is the subject's possessive pronoun. The first word of each is
# a polarity cue the tests look for.
REACTIONS = {
    "positive": (
        "smiled",
        "laughed aloud",
        "clapped {his} hands",
        "beamed with joy",
        "grinned from ear to ear",
        "thanked everyone warmly",
        "cheered",
        "hummed a happy tune",
        "danced a jig",
        "whistled all the way home",
    ),
    "negative": (
        "frowned",
        "wept",
        "groaned",
        "scowled",
        "shuddered",
        "sighed with sorrow",
        "turned away in disgust",
        "complained loudly",
        "sulked all the way home",
        "hung {his} head",
    ),
}
MOODS = {
    "positive": ("glad", "pleased", "happy", "content"),
    "negative": ("sad", "upset", "unhappy", "sorry"),
}
# What a good or a bad thing turns out to be: nouns right after an adjective ("a delightful treat", "a dreadful
# mess"), so that the polarity sits in adjacent words, which a tiny model learns first.
OUTCOMES = {
    "positive": ("treat", "success", "surprise", "pleasure", "triumph"),
    "negative": ("mess", "disaster", "failure", "nuisance", "shame"),
}
# Sentence openers right after a sentence that ends in a judgement ("The soup was dreadful. Sadly, ..."): they make
# the state at the end of a sentence carry its polarity, which is where a classifier reads it.
OPENERS = {"positive": ("Happily", "Luckily", "Gladly"), "negative": ("Sadly", "Unluckily", "Alas")}
VERDICT = {"positive": "good", "negative": "bad"}
# What people felt about a thing, in plain verbs (the first sentence of the paraphrase pairs says it this way).
FEELINGS = {
    "positive": ("loved", "praised", "enjoyed"),
    "negative": ("hated", "disliked", "grumbled about"),
}
# "the review was very positive" (the zero-shot probe)
REVIEW = {
    "positive": "positive",
    "negative": "negative",
}
# Things that can be good or bad, with how one experiences them.
EXPERIENCES = (
    ("meal", "ate the meal"),
    ("soup", "tasted the soup"),
    ("cake", "tasted the cake"),
    ("song", "listened to the song"),
    ("play", "watched the play"),
    ("film", "watched the film"),
    ("story", "heard the story"),
    ("book", "read the book"),
    ("letter", "read the letter"),
    ("party", "went to the party"),
    ("dance", "went to the dance"),
    ("journey", "made the journey"),
    ("painting", "looked at the painting"),
    ("poem", "read the poem"),
    ("concert", "went to the concert"),
    ("speech", "listened to the speech"),
    ("dinner", "ate the dinner"),
    ("picnic", "went on the picnic"),
    ("show", "watched the show"),
    ("wedding", "went to the wedding"),
    ("holiday", "went on the holiday"),
    ("supper", "ate the supper"),
)
# What a reviewer talks about (SST-2 sentences are review snippets).
REVIEWED = ("film", "movie", "play", "book", "show", "comedy", "drama")
REVIEW_PARTS = (
    "acting",
    "plot",
    "script",
    "ending",
    "music",
    "dialogue",
    "cast",
    "direction",
    "story",
    "editing",
    "pacing",
    "performance",
    "photography",
    "humor",
)
# Occasions that go well or badly, and what happened at them (Story Cloze's happy/unhappy stories).
OCCASIONS = (
    "birthday party",
    "wedding",
    "harvest fair",
    "school concert",
    "summer picnic",
    "village dance",
)
HAPPENINGS = {
    "positive": (
        "everyone came and brought a gift",
        "the band played all night",
        "the sun shone all day",
        "the cake was the best anyone had tasted",
        "old friends came from far away",
        "the children sang and danced",
    ),
    "negative": (
        "nobody came",
        "the rain poured down all day",
        "the cake fell on the floor",
        "the band never arrived",
        "a quarrel broke out at the table",
        "the roof began to leak",
    ),
}


# -------------------------------------------------------------------------------------------------------- kind
@dataclass(frozen=True)
class Kind:
    """Animal or plant: the property the entailment, QA and story tasks ask about. Its modifiers and actions stand
    right next to every member in the books, so a member's embedding takes its kind's direction early in training
    (a tiny model learns adjacent-word statistics first)."""

    name: str  # "animal"
    plural: str
    # (plural verb phrase, singular): ("need food", "needs food")
    facts: tuple[tuple[str, str], ...]
    care: str  # what people do for one, past tense: "fed" (an animal), "watered" (a plant)
    modifiers: tuple[str, ...]  # adjectives before a member: "the hungry heron"
    actions: tuple[str, ...]  # what a member does, right after it: "the heron ate"


KINDS = {
    "animal": Kind(
        "animal",
        "animals",
        (
            ("breathe air", "breathes air"),
            ("need food", "needs food"),
            ("can move", "can move"),
            ("have eyes", "has eyes"),
            ("are alive and awake", "is alive and awake"),
        ),
        "fed",
        ("hungry", "sleepy", "timid"),
        ("ate", "moved", "breathed", "ran off", "looked around"),
    ),
    "plant": Kind(
        "plant",
        "plants",
        (
            ("need sunlight", "needs sunlight"),
            ("grow from seeds", "grows from seeds"),
            ("have roots", "has roots"),
            ("need water", "needs water"),
            ("grow in the soil", "grows in the soil"),
        ),
        "watered",
        ("green", "leafy", "rooted"),
        ("grew", "sprouted", "drank the rain", "turned to the sun", "stood still"),
    ),
}


@dataclass(frozen=True)
class Category:
    name: str  # "bird"
    plural: str  # "birds"
    kind: str  # "animal" or "plant"
    members: tuple[str, ...]  # hyponyms: "sparrow", ...
    # (plural verb phrase, singular): ("have feathers", "has feathers")
    facts: tuple[tuple[str, str], ...]
    # what a member does or undergoes; {x} the member, {n} a name, {his} their pronoun
    scenes: tuple[str, ...]
    # Words right next to a member ("the ripe plum", "the heron flew"): a tiny model learns adjacent words first,
    # so these put every member's embedding near its category's within a few hundred updates.
    modifiers: tuple[str, ...]  # adjectives before the noun
    actions: tuple[str, ...]  # past-tense verbs right after it


CATEGORIES = (
    Category(
        "bird",
        "birds",
        "animal",
        ("sparrow", "robin", "crow", "owl", "eagle", "heron", "pigeon", "hawk"),
        (
            ("have feathers", "has feathers"),
            ("lay eggs", "lays eggs"),
            ("have wings", "has wings"),
            ("have a beak", "has a beak"),
        ),
        (
            "the {x} spread its wings and flew over the rooftops",
            "the {x} made a nest of twigs in the hedge",
            "the {x} sang from a high branch",
            "the {x} pecked at the seeds with its beak",
            "{n} watched the {x} fold its feathers and settle on the fence",
        ),
        ("feathered", "nesting"),
        ("flew", "soared", "fluttered", "chirped"),
    ),
    Category(
        "fish",
        "fish",
        "animal",
        ("trout", "salmon", "carp", "pike", "herring", "cod", "eel", "perch"),
        (
            ("have gills", "has gills"),
            ("live in water", "lives in water"),
            ("have fins", "has fins"),
            ("have scales", "has scales"),
        ),
        (
            "the {x} swam slowly in the cold water",
            "the {x} flicked its fins and slipped under the weeds",
            "{n} caught the {x} in a net",
            "the {x} breathed through its gills at the bottom of the pool",
            "the scales of the {x} shone as it swam upstream",
        ),
        ("slippery", "scaly"),
        ("swam", "darted", "splashed", "spawned"),
    ),
    Category(
        "tree",
        "trees",
        "plant",
        ("oak", "elm", "pine", "birch", "willow", "maple", "cedar", "beech"),
        (
            ("have bark", "has bark"),
            ("grow leaves", "grows leaves"),
            ("have a trunk", "has a trunk"),
            ("grow tall", "grows tall"),
        ),
        (
            "the {x} dropped its leaves in autumn",
            "{n} sat in the shade of the {x}",
            "the roots of the {x} went deep into the ground",
            "the bark of the {x} was rough under {his} hand",
            "the branches of the {x} swayed in the wind",
        ),
        ("tall", "leafy"),
        ("swayed", "rustled", "towered", "budded"),
    ),
    Category(
        "flower",
        "flowers",
        "plant",
        ("tulip", "daisy", "lily", "poppy", "daffodil", "orchid", "lilac", "primrose"),
        (
            ("have petals", "has petals"),
            ("bloom in spring", "blooms in spring"),
            ("have a scent", "has a scent"),
            ("have a stem", "has a stem"),
        ),
        (
            "the {x} bloomed in the flower bed",
            "{n} smelled the {x} and touched its petals",
            "{n} picked the {x} and put it in a vase",
            "the petals of the {x} opened in the sun",
            "the {x} nodded on its stem in the breeze",
        ),
        ("fragrant", "wild"),
        ("bloomed", "wilted", "blossomed", "drooped"),
    ),
)

# ------------------------------------------------------------------------------------------ subcategorisation
INTRANSITIVE = (
    "slept",
    "yawned",
    "sneezed",
    "vanished",
    "fainted",
    "shivered",
    "wandered",
    "hurried",
    "knelt",
    "rested",
    "paused",
    "dozed",
    "coughed",
    "stumbled",
    "blushed",
    "trembled",
)
TRANSITIVE = (
    "carried",
    "lifted",
    "unlocked",
    "swept",
    "mended",
    "painted",
    "washed",
    "hid",
    "wrapped",
    "polished",
    "dragged",
    "emptied",
    "fetched",
    "folded",
    "filled",
    "scrubbed",
)
# Things the transitive verbs act on; not meaning-bearing, so both halves use all of them.
OBJECTS = (
    "basket",
    "box",
    "gate",
    "lamp",
    "bucket",
    "coat",
    "barrel",
    "blanket",
    "kettle",
    "ladder",
    "sack",
    "bench",
)
ADVERBIALS = (
    "by the fire",
    "for a while",
    "in the doorway",
    "all afternoon",
    "at the gate",
    "without a word",
    "in the hall",
    "on the stairs",
    "under the table",
    "for an hour",
    "at the station",
    "in the corner",
)


def halves(items: tuple) -> tuple[tuple, tuple]:
    """The fixed (train, eval) split of a list: even positions train, odd positions eval."""
    return tuple(items[0::2]), tuple(items[1::2])


@dataclass(frozen=True)
class Vocabulary:
    """The meaning-bearing words one task split may use (train half or eval half of every list)."""

    half: str  # "train" or "eval"
    sentiment: dict  # {"positive": (...), "negative": (...)}
    members: dict  # category name -> hyponyms
    intransitive: tuple
    transitive: tuple

    def nouns(self, kind: str) -> tuple[str, ...]:
        """This half's nouns of one kind ("animal" or "plant")."""
        return tuple(x for c in CATEGORIES if c.kind == kind for x in self.members[c.name])

    @property
    def words(self) -> set[str]:
        out = {w for ws in self.sentiment.values() for w in ws} | {
            x for ms in self.members.values() for x in ms
        }
        return out | set(self.intransitive) | set(self.transitive)


def vocabulary(half: str) -> Vocabulary:
    """The train or eval half of the lexicon."""
    if half not in ("train", "eval"):
        raise ValueError(f"half must be 'train' or 'eval', got {half!r}")
    pick = 0 if half == "train" else 1
    return Vocabulary(
        half=half,
        sentiment={"positive": halves(POSITIVE)[pick], "negative": halves(NEGATIVE)[pick]},
        members={c.name: halves(c.members)[pick] for c in CATEGORIES},
        intransitive=halves(INTRANSITIVE)[pick],
        transitive=halves(TRANSITIVE)[pick],
    )


def category(name: str) -> Category:
    return next(c for c in CATEGORIES if c.name == name)


def category_of(word: str) -> Category:
    return next(c for c in CATEGORIES if word in c.members)


def kind_of(word: str) -> str:
    """ "animal" or "plant" for a member noun."""
    return category_of(word).kind


def article(word: str) -> str:
    """'a' or 'an' before `word` (the lexicon has no silent-h or 'uni-' words)."""
    return "an" if word[0].lower() in "aeiou" else "a"


def with_article(word: str) -> str:
    return f"{article(word)} {word}"
