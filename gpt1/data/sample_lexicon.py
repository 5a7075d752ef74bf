"""The lexicon of the offline sample data: which words exist, what they mean, and which half each task may train on.

Meaning lives in four relations, each taught by the generated books and tested by the generated tasks (the design
is in `gpt1.data.sample`):

* sentiment: adjectives that are positive or negative (`POSITIVE`, `NEGATIVE`);
* taxonomy: hyponyms that belong to one of ten categories (`CATEGORIES`: a heron is a bird);
* synonymy: sets of interchangeable verbs, adjectives, object nouns and place nouns (`SYNONYMS`);
* subcategorisation: verbs that never take an object (`INTRANSITIVE`).

Every list is split the same fixed way, independent of the seed: items at even positions are the *train* half,
items at odd positions the *eval* half (`halves`). Task train splits draw meaning-bearing words only from the
train half; dev and test splits only from the eval half. The books use both halves alike.

A word belongs to exactly one list, and a synonym-set word appears in the books only in its own set's frames,
so its contexts are those of its set (checked by tests/test_sample_data.py).
"""

from __future__ import annotations

from dataclasses import dataclass

FEMALE_NAMES = ("Anna", "Mia", "Clara", "Lucy", "Emma", "Nora", "Alice", "Kate", "Martha", "Ruth", "Jane", "Ella",
                "Molly", "Edith", "Hannah", "Amy", "Susan", "Beth", "Eva", "Laura")
MALE_NAMES = ("Tom", "Ben", "Hugh", "Peter", "Sam", "Oliver", "Henry", "Ned", "James", "Paul", "Fred", "Walter",
              "Arthur", "George", "Leo", "Harry", "Dan", "Carl", "Simon", "Owen")
VILLAGES = ("Dunmore", "Hartwell", "Kingsbury", "Thornbury", "Marlow", "Selby", "Caldwell", "Penrith", "Wyndham",
            "Brackley", "Ambleside", "Greyhaven")
# Where and when things happen; none of these words is in a meaning-bearing list.
PLACES = ("by the river", "in the garden", "at the market", "near the mill", "in the square", "behind the barn",
          "beside the pond", "on the bridge", "by the well", "at the edge of the lake",
          "in the orchard", "near the church", "in the yard", "on the riverbank", "by the old wall")
TIMES = ("at dawn", "in the morning", "at noon", "in the afternoon", "in the evening", "after supper", "on Sunday",
         "one spring morning", "late that night", "the next day", "on a winter afternoon", "before breakfast",
         "that summer", "at sunset")
PEOPLE = ("a man", "a woman", "a boy", "a girl", "an old man", "a young woman", "a farmer", "a child",
          "a fisherman", "a baker", "a teacher", "a sailor")

# ---------------------------------------------------------------------------------------------------- sentiment
POSITIVE = ("wonderful", "delightful", "charming", "lovely", "splendid", "pleasant", "cheerful", "brilliant",
            "marvelous", "graceful", "superb", "joyful", "excellent", "glorious", "merry", "elegant", "magnificent",
            "delicious", "beautiful", "perfect", "radiant", "gorgeous", "terrific", "jolly")
NEGATIVE = ("dreadful", "awful", "terrible", "horrid", "gloomy", "bitter", "wretched", "dismal", "miserable",
            "hideous", "nasty", "dull", "cruel", "foul", "grim", "harsh", "tedious", "ugly", "vile", "sour", "bleak",
            "shabby", "rotten", "ghastly")
# How people react to something good or bad; `{his}` is the subject's possessive pronoun. The first word of each is
# a polarity cue the tests look for.
REACTIONS = {
    "positive": ("smiled", "laughed aloud", "clapped {his} hands", "beamed with joy", "grinned from ear to ear",
                 "thanked everyone warmly", "cheered", "hummed a happy tune", "danced a jig",
                 "whistled all the way home"),
    "negative": ("frowned", "wept", "groaned", "scowled", "shuddered", "sighed with sorrow",
                 "turned away in disgust", "complained loudly", "sulked all the way home", "hung {his} head"),
}
MOODS = {"positive": ("glad", "pleased", "happy", "content"), "negative": ("sad", "upset", "unhappy", "sorry")}
# What a good or a bad thing turns out to be: nouns right after an adjective ("a delightful treat", "a dreadful
# mess"), so that the polarity sits in adjacent words, which a tiny model learns first.
OUTCOMES = {"positive": ("treat", "success", "surprise", "pleasure", "triumph"),
            "negative": ("mess", "disaster", "failure", "nuisance", "shame")}
# Sentence openers right after a sentence that ends in a judgement ("The soup was dreadful. Sadly, ..."): they make
# the state at the end of a sentence carry its polarity, which is where a classifier reads it.
OPENERS = {"positive": ("Happily", "Luckily", "Gladly"), "negative": ("Sadly", "Unluckily", "Alas")}
VERDICT = {"positive": "good", "negative": "bad"}  # the two "categories" of sentiment adjectives
REVIEW = {"positive": "positive", "negative": "negative"}  # "the review was very positive" (the zero-shot probe)
# Things that can be good or bad, with how one experiences them.
EXPERIENCES = (("meal", "ate the meal"), ("soup", "tasted the soup"), ("cake", "tasted the cake"),
               ("song", "listened to the song"), ("play", "watched the play"), ("film", "watched the film"),
               ("story", "heard the story"), ("book", "read the book"), ("letter", "read the letter"),
               ("party", "went to the party"), ("dance", "went to the dance"), ("journey", "made the journey"),
               ("painting", "looked at the painting"), ("poem", "read the poem"), ("concert", "went to the concert"),
               ("speech", "listened to the speech"), ("dinner", "ate the dinner"), ("picnic", "went on the picnic"),
               ("show", "watched the show"), ("wedding", "went to the wedding"), ("holiday", "went on the holiday"),
               ("supper", "ate the supper"))
# What a reviewer talks about (SST-2 sentences are review snippets).
REVIEWED = ("film", "movie", "play", "book", "show", "comedy", "drama")
REVIEW_PARTS = ("acting", "plot", "script", "ending", "music", "dialogue", "cast", "direction", "story", "editing",
                "pacing", "performance", "photography", "humor")

# ----------------------------------------------------------------------------------------------------- taxonomy


@dataclass(frozen=True)
class Category:
    name: str  # "bird"
    plural: str  # "birds"
    members: tuple[str, ...]  # hyponyms: "sparrow", ...
    facts: tuple[tuple[str, str], ...]  # (plural verb phrase, singular): ("have feathers", "has feathers")
    scenes: tuple[str, ...]  # what a member does or undergoes; {x} the member, {n} a name, {his} their pronoun
    # Words right next to a member or the category word ("the ripe plum", "the heron flew"): a tiny model learns
    # adjacent words first, so these put every member's embedding near its category's within a few hundred steps.
    modifiers: tuple[str, ...]  # adjectives before the noun
    actions: tuple[str, ...]  # past-tense verbs right after it


CATEGORIES = (
    Category("bird", "birds",
             ("sparrow", "robin", "crow", "owl", "eagle", "heron", "pigeon", "hawk"),
             (("have feathers", "has feathers"), ("lay eggs", "lays eggs"), ("have wings", "has wings"),
              ("have a beak", "has a beak")),
             ("the {x} spread its wings and flew over the rooftops", "the {x} made a nest of twigs in the hedge",
              "the {x} sang from a high branch", "the {x} pecked at the seeds with its beak",
              "{n} watched the {x} fold its feathers and settle on the fence"),
             ("feathered", "nesting"), ("flew", "soared", "fluttered", "chirped")),
    Category("fish", "fish",
             ("trout", "salmon", "carp", "pike", "herring", "cod", "eel", "perch"),
             (("have gills", "has gills"), ("live in water", "lives in water"), ("have fins", "has fins"),
              ("have scales", "has scales")),
             ("the {x} swam slowly in the cold water", "the {x} flicked its fins and slipped under the weeds",
              "{n} caught the {x} in a net", "the {x} breathed through its gills at the bottom of the pool",
              "the scales of the {x} shone as it swam upstream"),
             ("slippery", "scaly"), ("swam", "darted", "splashed", "spawned")),
    Category("insect", "insects",
             ("beetle", "ant", "bee", "wasp", "moth", "butterfly", "cricket", "flea"),
             (("have six legs", "has six legs"), ("have antennae", "has antennae"),
              ("hatch from eggs", "hatches from eggs"), ("have a hard shell", "has a hard shell")),
             ("the {x} crawled across the leaf on its six legs", "the {x} buzzed around the candle",
              "the {x} waved its antennae and crept under a log", "{n} let the {x} walk along {his} finger",
              "the {x} settled on the clover"),
             ("buzzing", "creeping"), ("crawled", "buzzed", "scuttled", "stung")),
    Category("tree", "trees",
             ("oak", "elm", "pine", "birch", "willow", "maple", "cedar", "beech"),
             (("have roots", "has roots"), ("have bark", "has bark"), ("grow leaves", "grows leaves"),
              ("grow from seeds", "grows from seeds")),
             ("the {x} dropped its leaves in autumn", "{n} sat in the shade of the {x}",
              "the roots of the {x} went deep into the ground", "the bark of the {x} was rough under {his} hand",
              "the branches of the {x} swayed in the wind"),
             ("tall", "leafy"), ("swayed", "rustled", "towered", "budded")),
    Category("flower", "flowers",
             ("tulip", "daisy", "lily", "poppy", "daffodil", "orchid", "lilac", "primrose"),
             (("have petals", "has petals"), ("bloom in spring", "blooms in spring"),
              ("need sunlight", "needs sunlight"), ("have a scent", "has a scent")),
             ("the {x} bloomed in the flower bed", "{n} smelled the {x} and touched its petals",
              "{n} picked the {x} and put it in a vase", "the petals of the {x} opened in the sun",
              "the {x} nodded on its stem in the breeze"),
             ("fragrant", "wild"), ("bloomed", "wilted", "blossomed", "drooped")),
    Category("fruit", "fruits",
             ("apple", "pear", "plum", "cherry", "peach", "grape", "lemon", "apricot"),
             (("contain seeds", "contains seeds"), ("grow on plants", "grows on a plant"),
              ("ripen in summer", "ripens in summer"), ("are full of juice", "is full of juice")),
             ("{n} ate the ripe {x} and spat out the seeds", "the {x} hung ripe on the branch",
              "{n} peeled the {x} and shared it", "{n} put the {x} in the fruit bowl",
              "the juice of the {x} ran down {his} chin"),
             ("ripe", "juicy"), ("ripened", "dangled", "split", "bruised")),
    Category("vegetable", "vegetables",
             ("carrot", "turnip", "onion", "cabbage", "potato", "bean", "leek", "radish"),
             (("grow in the soil", "grows in the soil"), ("are planted in rows", "is planted in rows"),
              ("are cooked in soups", "is cooked in soups"), ("are picked in autumn", "is picked in autumn")),
             ("{n} dug the {x} out of the soil", "{n} chopped the {x} for the stew",
              "the {x} grew in a row in the vegetable patch", "{n} washed the mud off the {x}",
              "{n} dropped the {x} into the boiling pot"),
             ("fresh", "raw"), ("sprouted", "boiled", "simmered", "steamed")),
    Category("tool", "tools",
             ("hammer", "chisel", "wrench", "drill", "axe", "shovel", "rake", "spade"),
             (("have a handle", "has a handle"), ("are used for work", "is used for work"),
              ("are kept in a shed", "is kept in a shed"), ("are made of iron", "is made of iron")),
             ("{n} took the {x} down from the workshop wall", "{n} held the {x} by its handle and set to work",
              "the {x} hung on a nail in the shed with the other tools", "{n} cleaned the {x} and oiled it",
              "{n} worked with the {x} until the job was done"),
             ("rusty", "sharp"), ("clanged", "clattered", "rusted", "gleamed")),
    Category("vehicle", "vehicles",
             ("cart", "wagon", "carriage", "sled", "bicycle", "tram", "van", "cab"),
             (("have wheels", "has wheels"), ("carry people", "carries people"),
              ("have seats", "has seats"), ("need a driver", "needs a driver")),
             ("{n} rode in the {x} to town", "the wheels of the {x} rattled over the cobbles",
              "the {x} carried them down the hill", "the driver stopped the {x} at the crossroads",
              "{n} climbed into the {x} and took a seat"),
             ("creaking", "rolling"), ("rattled", "rolled", "trundled", "bumped")),
    Category("instrument", "instruments",
             ("violin", "flute", "drum", "harp", "piano", "trumpet", "cello", "guitar"),
             (("make music", "makes music"), ("are played by musicians", "is played by a musician"),
              ("need tuning", "needs tuning"), ("are heard in concerts", "is heard in concerts")),
             ("{n} played a tune on the {x}", "the music of the {x} filled the hall",
              "{n} tuned the {x} before the dance began", "the musician put the {x} back in its case",
              "{n} practised the {x} every evening"),
             ("tuned", "wooden"), ("sounded", "rang", "twanged", "played")),
)

# ----------------------------------------------------------------------------------------------------- synonyms


@dataclass(frozen=True)
class SynonymSet:
    pos: str  # "verb" (words are (base, past) pairs), "adj", "obj" (object noun) or "place" (place noun)
    words: tuple  # interchangeable members
    frames: tuple[str, ...]  # sentences using a member: {w} (verbs: past tense, {b} base form), {n} a name
    cues: tuple[str, ...]  # words of the frames that only this set's frames use (the tests check co-occurrence)
    needs_object: bool = False  # verbs that are ungrammatical without an object ("He repaired at the gate.")

    def forms(self, form: str = "past") -> tuple[str, ...]:
        """Surface forms: verbs in `form` ("base" or "past"), other parts of speech as they are."""
        if self.pos != "verb":
            return self.words
        return tuple(base if form == "base" else past for base, past in self.words)


def _verbs(*pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(tuple(pair.split("/")) for pair in pairs)


SYNONYMS = (
    SynonymSet("verb", _verbs("fix/fixed", "repair/repaired", "mend/mended"),
               ("{n} {w} the broken gate with a few nails.", "The clock was broken, so {n} {w} it before dark.",
                "{n} {w} the leaking roof before the rains came.", "'Can you {b} the broken gate?' asked {n}."),
               ("broken", "leaking"), needs_object=True),
    SynonymSet("verb", _verbs("buy/bought", "purchase/purchased"),
               ("{n} {w} a loaf of bread for two pennies.", "With the last of {his} coins, {n} {w} a warm blanket.",
                "At the fair {n} {w} a ribbon from a peddler and paid in silver.",
                "{n} saved {his} pennies to {b} a warm blanket."), ("pennies", "coins", "paid")),
    SynonymSet("verb", _verbs("find/found", "discover/discovered"),
               ("After a long search {n} {w} the lost key under the stairs.",
                "{n} {w} a hidden door behind the bookcase.", "Digging in the yard, {n} {w} an iron box.",
                "{n} hoped to {b} the lost key before nightfall."),
               ("search", "lost", "hidden", "digging"), needs_object=True),
    SynonymSet("verb", _verbs("grab/grabbed", "seize/seized", "grasp/grasped"),
               ("{n} {w} the rope with both hands before it slipped away.",
                "In an instant {n} {w} the thief by the collar.", "{n} tried to {b} the rope with both hands."),
               ("rope", "thief", "collar"), needs_object=True),
    SynonymSet("verb", _verbs("lift/lifted", "raise/raised"),
               ("{n} {w} the heavy basket above {his} head.",
                "With all {his} strength {n} {w} the iron bar off the ground.",
                "{n} was not strong enough to {b} the heavy basket."), ("heavy", "strength"), needs_object=True),
    SynonymSet("verb", _verbs("examine/examined", "inspect/inspected"),
               ("{n} {w} the map closely by candlelight.", "The captain {w} every barrel for cracks.",
                "The doctor {w} the wound with great care.", "The captain told {n} to {b} every barrel for cracks."),
               ("closely", "cracks", "wound"), needs_object=True),
    SynonymSet("verb", _verbs("build/built", "construct/constructed"),
               ("{n} {w} a wall of bricks and mortar.", "The workers {w} a new bridge across the stream.",
                "The workers began to {b} a wall of bricks and mortar."),
               ("bricks", "mortar", "workers"), needs_object=True),
    SynonymSet("verb", _verbs("destroy/destroyed", "wreck/wrecked", "ruin/ruined"),
               ("The storm {w} the barn and left nothing standing.", "The flood {w} the crops in the valley.",
                "The storm threatened to {b} the barn and leave nothing standing."),
               ("storm", "flood", "standing"), needs_object=True),
    SynonymSet("verb", _verbs("hide/hid", "conceal/concealed"),
               ("{n} {w} the letter under a loose floorboard so that no one would see it.",
                "The smugglers {w} their goods in a cave by the sea.",
                "{n} wanted to {b} the letter under a loose floorboard."), ("floorboard", "smugglers", "cave")),
    SynonymSet("verb", _verbs("choose/chose", "select/selected"),
               ("Of all the ribbons on the table, {n} {w} the blue one.",
                "The judges {w} a winner from the twelve entries.",
                "The judges had to {b} a winner from the twelve entries."), ("judges", "winner", "entries")),
    SynonymSet("verb", _verbs("throw/threw", "toss/tossed", "fling/flung"),
               ("{n} {w} the ball over the garden wall.", "The boys {w} pebbles into the pond one after another.",
                "{n} liked to {b} the ball over the garden wall."),
               ("ball", "pebbles")),
    SynonymSet("verb", _verbs("help/helped", "assist/assisted"),
               ("{n} {w} the old woman carry her bundles up the hill.",
                "When the farmer fell ill, the neighbours {w} him with the harvest.",
                "{n} offered to {b} the old woman with her bundles."),
               ("bundles", "neighbours", "harvest")),
    SynonymSet("adj", ("big", "large", "huge"),
               ("The {w} barn could hold a hundred cows.", "A {w} crowd gathered in the square to hear the news."),
               ("hundred", "crowd")),
    SynonymSet("adj", ("small", "little", "tiny"),
               ("The {w} mouse could sit in the palm of a hand.", "{n} lived in a {w} room with one narrow bed."),
               ("mouse", "palm", "narrow")),
    SynonymSet("adj", ("wet", "damp", "soaked"),
               ("After the rain {n}'s socks were {w} through.", "The {w} towels hung by the stove to dry."),
               ("rain", "towels", "dry")),
    SynonymSet("adj", ("quick", "fast", "swift"),
               ("The {w} horse won every race at the fair.", "{n} was {w} on {his} feet and reached the gate first."),
               ("race", "reached", "first")),
    SynonymSet("adj", ("quiet", "silent", "hushed"),
               ("The library was {w}, and no one spoke a word.", "At night the village was {w} and still."),
               ("spoke", "still")),
    SynonymSet("adj", ("dirty", "filthy", "grimy"),
               ("After the muddy walk, {n}'s boots were {w}.", "The {w} floor needed scrubbing with soap and water."),
               ("muddy", "soap", "scrubbing")),
    SynonymSet("adj", ("tired", "weary", "exhausted"),
               ("After the long walk {n} was {w} and went to bed early.",
                "The {w} horses could barely climb the last hill."), ("bed", "barely")),
    SynonymSet("adj", ("afraid", "scared", "frightened"),
               ("{n} was {w} of the dark and pulled the blanket over {his} head.",
                "The {w} children would not go near the deep well."), ("dark", "blanket")),
    SynonymSet("adj", ("rich", "wealthy"),
               ("The {w} merchant owned three warehouses and a great house.",
                "Only a {w} family could afford such a grand estate."), ("merchant", "afford", "estate")),
    SynonymSet("adj", ("angry", "furious"),
               ("{n} was {w} and slammed the door.", "The {w} farmer shouted at the boys who had trampled his wheat."),
               ("slammed", "shouted")),
    SynonymSet("adj", ("strange", "odd", "peculiar"),
               ("A {w} noise came from the cellar, and no one could explain it.",
                "{n} had a {w} dream about a talking kettle."), ("noise", "explain", "dream")),
    SynonymSet("adj", ("thin", "slender", "slim"),
               ("The {w} girl could slip between the fence posts.", "{n} cut a {w} slice of cheese."),
               ("slip", "slice")),
    SynonymSet("obj", ("hat", "cap"),
               ("{n} wore a {w} to keep the sun off {his} head.", "The wind blew {n}'s {w} into the ditch."),
               ("sun", "wind")),
    SynonymSet("obj", ("stone", "rock"),
               ("{n} sat on a flat {w} beside the stream.", "A {w} blocked the mouth of the tunnel."),
               ("flat", "blocked")),
    SynonymSet("obj", ("coat", "jacket", "cloak"),
               ("{n} buttoned {his} {w} against the cold wind.", "{n} hung {his} {w} on a hook by the door."),
               ("buttoned", "hook")),
    SynonymSet("obj", ("gift", "present"),
               ("{n} wrapped the {w} in paper and tied it with string for the birthday.",
                "On Christmas morning each child opened a {w}."), ("wrapped", "birthday", "opened")),
    SynonymSet("obj", ("bag", "sack", "pouch"),
               ("{n} carried the flour home in a {w}.", "The {w} was full of grain from the mill."),
               ("flour", "grain")),
    SynonymSet("obj", ("cup", "mug"),
               ("{n} drank hot tea from a {w}.", "{n} filled the {w} with warm milk."), ("tea", "milk")),
    SynonymSet("obj", ("rug", "carpet", "mat"),
               ("The {w} on the floor was soft under {his} bare feet.", "{n} beat the dust out of the {w}."),
               ("floor", "dust")),
    SynonymSet("obj", ("pail", "bucket"),
               ("{n} filled the {w} with water at the pump.", "The milkmaid carried a {w} to the cowshed."),
               ("water", "milkmaid")),
    SynonymSet("obj", ("boat", "ship", "vessel"),
               ("The {w} sailed out of the bay with the tide.", "The sailors loaded the {w} with barrels of salt."),
               ("sailed", "sailors", "tide")),
    SynonymSet("obj", ("lantern", "lamp"),
               ("{n} lit the {w} when the sun went down.", "The {w} glowed in the window all night."),
               ("lit", "glowed")),
    SynonymSet("place", ("road", "street", "lane"),
               ("Horses trotted along the {w} toward the market.", "{n} swept the snow from the {w} outside the inn."),
               ("trotted", "swept")),
    SynonymSet("place", ("path", "trail", "track"),
               ("The narrow {w} wound up through the hills.", "{n} followed the winding {w} into the valley."),
               ("wound", "winding")),
    SynonymSet("place", ("shop", "store"),
               ("The {w} on the corner sold bread and candles.", "{n} was the keeper of the {w} on the corner."),
               ("corner", "keeper")),
    SynonymSet("place", ("field", "meadow"),
               ("Cows grazed in the green {w} all summer.", "{n} ran across the {w} where the grass grew thick."),
               ("grazed", "grass")),
    SynonymSet("place", ("forest", "wood"),
               ("Wolves howled deep in the {w}.", "{n} walked for hours in the {w} and came home by the light of the stars."),
               ("wolves", "howled", "stars")),
    SynonymSet("place", ("harbor", "port"),
               ("The fishermen came back to the {w} at sunset.", "Gulls cried over the {w} all day long."),
               ("fishermen", "gulls")),
)
# Glosses that state synonymy outright ({a}, {b}: two members of one set).
GLOSSES = ("To say {a} is to say {b}.", "{A} means the same as {b}.", "'{A}?' asked {n}. 'Yes, {b},' said {m}.")

# ------------------------------------------------------------------------------------------ subcategorisation
INTRANSITIVE = ("slept", "yawned", "sneezed", "vanished", "fainted", "shivered", "wandered", "hurried", "knelt",
                "rested", "paused", "dozed", "coughed", "stumbled", "blushed", "trembled", "lingered", "napped",
                "arrived", "departed")
ADVERBIALS = ("by the fire", "for a while", "in the doorway", "all afternoon", "at the gate", "without a word",
              "in the hall", "on the stairs", "under the table", "for an hour", "at the station", "in the corner")


def halves(items: tuple) -> tuple[tuple, tuple]:
    """The fixed (train, eval) split of a list: even positions train, odd positions eval."""
    return tuple(items[0::2]), tuple(items[1::2])


@dataclass(frozen=True)
class Vocabulary:
    """The meaning-bearing words one task split may use (train half or eval half of every list)."""
    half: str  # "train" or "eval"
    sentiment: dict  # {"positive": (...), "negative": (...)}
    members: dict  # category name -> hyponyms
    synonyms: dict  # pos -> tuple of SynonymSet
    intransitive: tuple

    def category_of(self, word: str) -> Category:
        return next(c for c in CATEGORIES if word in c.members)


def vocabulary(half: str) -> Vocabulary:
    """The train or eval half of the lexicon."""
    if half not in ("train", "eval"):
        raise ValueError(f"half must be 'train' or 'eval', got {half!r}")
    pick = 0 if half == "train" else 1
    synonyms: dict[str, tuple] = {}
    for pos in ("verb", "adj", "obj", "place"):
        synonyms[pos] = halves(tuple(s for s in SYNONYMS if s.pos == pos))[pick]
    return Vocabulary(
        half=half,
        sentiment={"positive": halves(POSITIVE)[pick], "negative": halves(NEGATIVE)[pick]},
        members={c.name: halves(c.members)[pick] for c in CATEGORIES},
        synonyms=synonyms,
        intransitive=halves(INTRANSITIVE)[pick],
    )


def category(name: str) -> Category:
    return next(c for c in CATEGORIES if c.name == name)


def article(word: str) -> str:
    """'a' or 'an' before `word` (the lexicon has no silent-h or 'uni-' words)."""
    return "an" if word[0].lower() in "aeiou" else "a"


def with_article(word: str) -> str:
    return f"{article(word)} {word}"
