"""The word lists the product generator draws from: categories, product types, options, brands.

Kept as compact text tables so the whole shop vocabulary can be read (and extended) on one
screen. Eight top-level categories, 64 product types. Changing anything here changes every
generated catalog: bump `generator.GENERATOR_VERSION` so cached catalogs are rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass

TOP_CATEGORIES: dict[str, str] = {
    "beauty": "Beauty & Personal Care",
    "food": "Grocery & Gourmet Food",
    "fashion": "Clothing, Shoes & Jewelry",
    "furniture": "Home & Kitchen › Furniture",
    "electronics": "Electronics",
    "kitchen": "Home & Kitchen › Kitchen & Dining",
    "sports": "Sports & Outdoors",
    "home": "Home & Kitchen",
}

# Attributes every type of a top category may carry, besides its own.
SHARED_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "beauty": ("cruelty free", "paraben free", "long lasting", "travel size"),
    "food": ("gluten free", "non gmo", "low sugar", "ready to eat"),
    "fashion": ("machine wash", "quick drying", "moisture wicking", "relaxed fit"),
    "furniture": ("easy assembly", "solid wood", "space saving", "heavy duty"),
    "electronics": ("fast charging", "easy to use", "high speed", "long battery life"),
    "kitchen": ("dishwasher safe", "bpa free", "non stick", "easy clean"),
    "sports": ("lightweight", "non slip", "water resistant", "easy carry"),
    "home": ("easy clean", "fade resistant", "machine washable", "soft touch"),
}

# option set name -> (option group shown on the item page, values)
OPTION_SETS: dict[str, tuple[str, tuple[str, ...]]] = {
    name: (group, tuple(v.strip() for v in values.split(",")))
    for name, group, values in (
        (
            "apparel_colors",
            "color",
            "black, white, navy blue, heather gray, red, olive green, "
            "beige, burgundy, royal blue, pink, khaki, charcoal",
        ),
        ("device_colors", "color", "black, white, silver, space gray, blue, rose gold, green, red"),
        (
            "home_colors",
            "color",
            "white, ivory, gray, light gray, navy, sage green, blush pink, "
            "beige, charcoal, teal, mustard yellow",
        ),
        (
            "wood_finish",
            "color",
            "natural oak, walnut, espresso, white, black, rustic brown, gray wash",
        ),
        (
            "makeup_shades",
            "color",
            "nude beige, ruby red, berry, coral, mauve, rose pink, deep plum, classic red",
        ),
        ("gear_colors", "color", "black, blue, green, orange, red, gray, purple, teal"),
        ("apparel_sizes", "size", "x-small, small, medium, large, x-large, xx-large"),
        ("shoe_sizes", "size", "6, 6.5, 7, 7.5, 8, 8.5, 9, 9.5, 10, 10.5, 11, 12"),
        ("volume", "size", "1.7 fl oz, 3.4 fl oz, 8 fl oz, 12 fl oz, 16 fl oz, 33.8 fl oz"),
        ("weight", "size", "4 ounce, 8 ounce, 12 ounce, 1 pound, 2 pound, 5 pound"),
        ("pack", "pack", "pack of 1, pack of 2, pack of 3, pack of 4, pack of 6"),
        ("bedding_sizes", "size", "twin, full, queen, king, california king"),
        ("cable_length", "length", "3 ft, 6 ft, 10 ft, 15 ft"),
        (
            "phone_models",
            "model",
            "iphone 15, iphone 15 pro, iphone 15 pro max, galaxy s24, galaxy s24 ultra, pixel 8",
        ),
        (
            "snack_flavors",
            "flavor",
            "chocolate, vanilla, peanut butter, cookies and cream, "
            "salted caramel, strawberry, mixed berry",
        ),
        (
            "roasts",
            "flavor",
            "light roast, medium roast, dark roast, french vanilla, hazelnut, decaf",
        ),
        ("tea_flavors", "flavor", "jasmine, mint, lemon ginger, honey, matcha, earl grey"),
        ("heat", "flavor", "mild, medium hot, hot, extra hot"),
        (
            "scents",
            "scent",
            "lavender, vanilla bean, eucalyptus, ocean breeze, unscented, "
            "citrus, sandalwood, fresh linen",
        ),
        ("count", "size", "12 count, 24 count, 36 count, 48 count"),
        ("dumbbell_weight", "size", "5 pounds, 10 pounds, 15 pounds, 20 pounds, 25 pounds"),
        ("rug_sizes", "size", "2 x 3 ft, 3 x 5 ft, 5 x 7 ft, 8 x 10 ft"),
        ("curtain_sizes", "size", "42 x 63 inch, 42 x 84 inch, 52 x 84 inch, 52 x 95 inch"),
        ("pillow_sizes", "size", "16 x 16 inch, 18 x 18 inch, 20 x 20 inch, 24 x 24 inch"),
        ("capacity", "capacity", "12 oz, 16 oz, 20 oz, 32 oz, 40 oz"),
        ("tent_capacity", "size", "1 person, 2 person, 4 person, 6 person"),
        ("pan_size", "size", "8 inch, 10 inch, 12 inch"),
        ("piece_sets", "size", "5 piece, 10 piece, 14 piece, 24 piece"),
        ("switches", "style", "red switch, blue switch, brown switch"),
        ("fabrics", "material", "cotton, linen, polyester, microfiber, velvet"),
        ("belt_sizes", "size", "30, 32, 34, 36, 38, 40"),
        ("stool_height", "size", "24 inch, 26 inch, 30 inch"),
        ("mat_thickness", "size", "4mm, 6mm, 8mm, 10mm"),
        ("temperature", "style", "20 degree, 30 degree, 40 degree"),
        ("backpack_capacity", "capacity", "20l, 30l, 40l, 50l"),
        ("knife_size", "size", "6 inch, 8 inch, 10 inch"),
        ("towel_sets", "size", "2 piece, 4 piece, 6 piece, 8 piece"),
        ("candle_size", "size", "7 oz, 12 oz, 18 oz"),
        ("clock_size", "size", "10 inch, 12 inch, 14 inch"),
        ("audience", "style", "for women, for men, for kids, unisex"),
    )
}

# top | sub-category | type name | title aliases | own attributes | option sets | price range
_TYPES = """
beauty|Hair Care|hair dryer|blow dryer;hair blower|ionic;fast drying;low noise;ceramic;foldable handle;diffuser included|device_colors|19-129
beauty|Hair Care|shampoo|hair wash;scalp cleanser|sulfate free;color safe;volumizing;anti dandruff;argan oil|volume,scents|6-39
beauty|Makeup|lipstick|lip color;matte lip stain|matte finish;waterproof;moisturizing;high pigment;vegan formula|makeup_shades,pack|5-29
beauty|Skin Care|face moisturizer|daily face cream;hydrating lotion|hyaluronic acid;oil free;spf 30;fragrance free;sensitive skin|volume|9-59
beauty|Makeup|nail polish|nail lacquer;gel polish|quick dry;chip resistant;high shine;non toxic;vegan formula|makeup_shades,pack|4-24
beauty|Fragrance|eau de parfum|perfume spray;fragrance mist|floral notes;woody notes;long wear;fresh scent;gift box|volume,scents|19-149
beauty|Makeup|makeup brush set|cosmetic brushes;foundation brush kit|synthetic bristles;soft bristles;travel case;professional quality|device_colors,pack|8-45
beauty|Bath & Body|body wash|shower gel;body cleanser|moisturizing;natural ingredients;sensitive skin;deep cleansing;shea butter|volume,scents|5-29
food|Coffee & Tea|coffee beans|whole bean coffee;ground coffee|single origin;fair trade;organic;freshly roasted;arabica|roasts,weight|9-49
food|Coffee & Tea|green tea|tea bags;loose leaf tea|organic;caffeine free;antioxidant rich;individually wrapped|tea_flavors,count|4-29
food|Snacks|protein bars|snack bars;energy bars|high protein;low carb;keto friendly;plant based;individually wrapped|snack_flavors,count|12-49
food|Snacks|dark chocolate|chocolate bar;cocoa bar|fair trade;organic;sugar free;72 percent cocoa;vegan|snack_flavors,pack|4-29
food|Snacks|trail mix|nut mix;snack mix|high protein;no added sugar;roasted nuts;resealable bag|weight,pack|6-32
food|Pantry|olive oil|extra virgin olive oil;cooking oil|cold pressed;extra virgin;first harvest;glass bottle|volume,pack|8-45
food|Pantry|hot sauce|chili sauce;pepper sauce|small batch;all natural;vinegar based;no preservatives|heat,pack|4-24
food|Snacks|gummy candy|fruit gummies;gummy bears|fat free;real fruit juice;vegan;party size|snack_flavors,weight|3-24
fashion|Shoes|running shoes|athletic sneakers;walking shoes;trail trainers|breathable mesh;cushioned sole;arch support;memory foam|apparel_colors,shoe_sizes,audience|29-139
fashion|Clothing|t-shirt|crew neck tee;cotton shirt|short sleeve;soft cotton;crew neck;tagless label|apparel_colors,apparel_sizes,audience|8-39
fashion|Clothing|yoga pants|workout leggings;athletic tights|high waist;tummy control;four way stretch;side pockets|apparel_colors,apparel_sizes|14-59
fashion|Clothing|rain jacket|waterproof coat;windbreaker|waterproof;hooded;packable;zip pockets;lightweight shell|apparel_colors,apparel_sizes,audience|29-149
fashion|Shoes|ankle boots|chelsea boots;booties|faux leather;side zipper;block heel;slip resistant|apparel_colors,shoe_sizes|35-149
fashion|Clothing|wool socks|hiking socks;crew socks|merino wool;cushioned;odor control;warm winter|apparel_colors,pack|9-39
fashion|Accessories|baseball cap|dad hat;sun hat|adjustable strap;sun protection;embroidered logo;cotton twill|apparel_colors|9-35
fashion|Accessories|leather belt|dress belt;casual belt|genuine leather;reversible;metal buckle;gift box|apparel_colors,belt_sizes|12-55
furniture|Office Furniture|office chair|desk chair;task chair|ergonomic design;lumbar support;adjustable height;swivel;mesh back|device_colors|59-349
furniture|Living Room Furniture|bookshelf|book case;storage shelf|5 tier;open shelves;wall anchor;industrial style|wood_finish|39-249
furniture|Living Room Furniture|coffee table|center table;cocktail table|lift top;storage shelf;round top;modern design|wood_finish|49-299
furniture|Kitchen Furniture|bar stool|counter stool;bar chair|swivel;padded seat;footrest;set of 2|wood_finish,stool_height|39-229
furniture|Bedroom Furniture|nightstand|bedside table;end table|2 drawer;charging station;storage drawer;mid century|wood_finish|29-179
furniture|Living Room Furniture|tv stand|media console;entertainment center|cable management;storage cabinet;fits 65 inch tv;modern design|wood_finish|59-329
furniture|Living Room Furniture|bean bag chair|lazy sofa;floor chair|memory foam;removable cover;kids size;plush fabric|home_colors,fabrics|39-199
furniture|Entryway Furniture|shoe rack|shoe organizer;shoe shelf|4 tier;stackable;metal frame;entryway storage|wood_finish|15-89
electronics|Headphones|wireless earbuds|bluetooth earphones;in ear headphones|noise cancelling;charging case;sweat proof;touch control;bluetooth 5.3|device_colors|19-199
electronics|Cell Phone Accessories|phone case|protective cover;slim case|shockproof;clear back;magsafe compatible;drop protection;slim fit|device_colors,phone_models|8-45
electronics|Cables|charging cable|usb c cable;fast charger cord|braided nylon;fast charging;60w power delivery;tangle free|device_colors,cable_length,pack|6-29
electronics|Speakers|bluetooth speaker|portable speaker;wireless speaker|waterproof;deep bass;24 hour playtime;stereo pairing|device_colors|19-179
electronics|Power|power bank|portable charger;battery pack|10000mah;usb c;dual output;led display|device_colors|15-79
electronics|Computer Accessories|wireless mouse|cordless mouse;optical mouse|silent click;ergonomic design;rechargeable;adjustable dpi|device_colors|9-69
electronics|Computer Accessories|mechanical keyboard|gaming keyboard;rgb keyboard|rgb backlit;hot swappable;compact layout;anti ghosting|device_colors,switches|29-159
electronics|Cell Phone Accessories|screen protector|tempered glass;glass film|bubble free;case friendly;9h hardness;easy install|phone_models,pack|5-25
kitchen|Kitchen Utensils|cutting board|chopping board;bamboo board|juice groove;reversible;non slip feet;organic bamboo|wood_finish,pack|12-59
kitchen|Cutlery|chef knife|kitchen knife;cooking knife|high carbon steel;ergonomic handle;razor sharp;full tang|knife_size|15-129
kitchen|Drinkware|water bottle|insulated bottle;sports bottle|vacuum insulated;leak proof;stainless steel;straw lid|gear_colors,capacity|12-45
kitchen|Drinkware|coffee mug|ceramic mug;tea cup|microwave safe;large handle;gift box;stoneware|home_colors,capacity|8-32
kitchen|Cookware|frying pan|skillet;saute pan|induction compatible;oven safe;granite coating;stay cool handle|gear_colors,pan_size|19-99
kitchen|Food Storage|food storage containers|meal prep containers;glass containers|airtight lids;microwave safe;stackable;freezer safe|piece_sets|15-59
kitchen|Kitchen Utensils|mixing bowls|nesting bowls;prep bowls|stainless steel;airtight lids;non slip base;nesting design|gear_colors,piece_sets|15-59
kitchen|Cookware|tea kettle|stovetop kettle;whistling kettle|whistling;stainless steel;heat resistant handle;fast boil|gear_colors|19-79
sports|Yoga|yoga mat|exercise mat;fitness mat|extra thick;carrying strap;eco friendly;double sided|gear_colors,mat_thickness|15-79
sports|Camping|camping tent|dome tent;backpacking tent|easy setup;rainfly included;double layer;mesh windows|gear_colors,tent_capacity|49-299
sports|Strength Training|dumbbells|hand weights;free weights|neoprene coated;hex design;anti roll;set of 2|gear_colors,dumbbell_weight|19-149
sports|Strength Training|resistance bands|exercise bands;workout loops|5 resistance levels;latex free;door anchor;carry bag|gear_colors,pack|9-39
sports|Camping|sleeping bag|mummy bag;camping bag|compression sack;cold weather;washable;zipper draft tube|gear_colors,temperature|29-159
sports|Hiking|hiking backpack|daypack;trekking pack|rain cover;hydration compatible;padded straps;multiple compartments|gear_colors,backpack_capacity|25-149
sports|Fitness|jump rope|skipping rope;speed rope|tangle free;ball bearings;adjustable length;foam handles|gear_colors|6-29
sports|Fitness|foam roller|muscle roller;massage roller|high density;textured surface;deep tissue;travel size|gear_colors|12-49
home|Bedding|bed sheets|sheet set;fitted sheet set|deep pocket;breathable;wrinkle free;hotel quality|home_colors,bedding_sizes|19-129
home|Home Decor|throw pillow covers|cushion covers;decorative pillowcases|hidden zipper;double sided;boho style;linen blend|home_colors,pillow_sizes|9-39
home|Bath|shower curtain|bathroom curtain;fabric shower liner|waterproof;weighted hem;mildew resistant;hooks included|home_colors|12-49
home|Home Decor|area rug|living room rug;floor carpet|low pile;non shedding;non slip backing;stain resistant|home_colors,rug_sizes|29-299
home|Window Treatments|blackout curtains|window drapes;thermal curtains|thermal insulated;noise reducing;grommet top;room darkening|home_colors,curtain_sizes|19-79
home|Home Decor|scented candle|soy candle;jar candle|soy wax;cotton wick;50 hour burn;gift box|scents,candle_size|9-45
home|Home Decor|wall clock|decorative clock;kitchen clock|silent movement;battery operated;large numbers;modern design|wood_finish,clock_size|15-69
home|Bath|bath towels|towel set;cotton towels|highly absorbent;quick drying;100 percent cotton;hotel quality|home_colors,towel_sets|15-79
"""


@dataclass(frozen=True)
class ProductType:
    """One kind of product the generator makes (e.g. `running shoes` in Fashion › Shoes)."""

    top: str
    sub: str
    name: str
    aliases: tuple[str, ...]
    attributes: tuple[str, ...]
    """Own attributes first, then the ones shared by the top category."""
    option_sets: tuple[str, ...]
    price_range: tuple[float, float]

    @property
    def category_path(self) -> str:
        return f"{TOP_CATEGORIES[self.top]} › {self.sub} › {self.name.title()}"


def _parse_types() -> tuple[ProductType, ...]:
    types = []
    for line in _TYPES.strip().splitlines():
        top, sub, name, aliases, attrs, options, prices = line.split("|")
        low, high = prices.split("-")
        types.append(
            ProductType(
                top=top,
                sub=sub,
                name=name,
                aliases=tuple(aliases.split(";")),
                attributes=tuple(attrs.split(";")) + SHARED_ATTRIBUTES[top],
                option_sets=tuple(options.split(",")),
                price_range=(float(low), float(high)),
            )
        )
    return tuple(types)


PRODUCT_TYPES: tuple[ProductType, ...] = _parse_types()

BRAND_HEADS = (
    "Al",
    "Bel",
    "Cor",
    "Dav",
    "El",
    "Fen",
    "Gal",
    "Hal",
    "Ira",
    "Jun",
    "Kel",
    "Lum",
    "Mar",
    "Nor",
    "Ori",
    "Pel",
    "Quin",
    "Ros",
    "Sol",
    "Tav",
    "Ul",
    "Ver",
    "Wil",
    "Xan",
    "Yor",
    "Zen",
)
BRAND_TAILS = ("ora", "ex", "ia", "ton", "ique", "ova", "ix", "wood", "ley", "mont", "is", "ara")

REVIEW_TITLES = {
    5: ("Love it", "Exactly what I wanted", "Great value", "Highly recommend"),
    4: ("Very good", "Works well", "Nice quality", "Happy with it"),
    3: ("It is okay", "Does the job", "Average", "Mixed feelings"),
    2: ("Not great", "Disappointed", "Could be better", "Meh"),
    1: ("Returned it", "Poor quality", "Would not buy again", "Broke quickly"),
}
REVIEW_BODIES = {
    5: "This {type} is excellent and arrived quickly.",
    4: "Good {type} for the price, only small issues.",
    3: "The {type} works but feels a bit cheap.",
    2: "My {type} did not match the pictures.",
    1: "The {type} stopped working after a week.",
}
