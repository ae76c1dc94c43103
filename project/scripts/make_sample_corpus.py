"""Write the small sample corpus that ships with the spaCy project (project/sample/).

The sentences are written for this project from the templates and name lists below
(news-style sentences with PER / ORG / LOC / MISC entities); nothing is taken from
CoNLL or any other dataset. The output is deterministic (seeded), so running

    python project/scripts/make_sample_corpus.py project/sample

(or `spacy project run sample` in project/)
reproduces the committed files exactly. Layout (the same as a CoNLL data folder):

    en/train.conll  en/dev.conll          English, tagged (IOB2)
    de/train.txt    es/train.txt          raw target text, one sentence a line
    de/test.conll   es/test.conll         tagged target test sets
"""
import random
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

# --- entity fillers, per language -------------------------------------------------------
PER = [
    "Anna Keller", "John Miller", "Maria Lopez", "Hans Becker", "Carlos Ruiz", "Sophie Martin",
    "Peter Novak", "Elena Rossi", "David Brown", "Yuki Tanaka", "Ahmed Hassan", "Laura Schmidt",
    "Thomas Weber", "Lucia Fernandez", "Mark Evans", "Olga Petrova", "Jan de Vries", "Miguel Torres",
    "Clara Wagner", "Robert King", "Ines Moreno", "Paul Fischer", "Kofi Mensah", "Sara Lindqvist",
    "Keller", "Miller", "Becker", "Novak", "Torres", "Wagner", "Priya Sharma", "Luis Ortega",
]
ORG = {
    "en": ["Siemens", "Deutsche Bank", "United Nations", "Real Madrid", "Bayern Munich", "Reuters",
           "European Commission", "Volkswagen", "Barcelona", "NATO", "Greenpeace", "Telefonica",
           "Red Cross", "World Bank", "Ajax", "Lufthansa", "Nestle", "Bundesbank", "Iberia",
           "Central Bank", "Social Democrats", "Green Party", "Interpol", "Airbus"],
    "de": ["Siemens", "Deutsche Bank", "Vereinten Nationen", "Real Madrid", "Bayern München",
           "Europäische Kommission", "Volkswagen", "Barcelona", "NATO", "Greenpeace", "Rote Kreuz",
           "Weltbank", "Lufthansa", "Bundesbank", "SPD", "CDU", "Grünen", "Interpol", "Airbus",
           "Borussia Dortmund", "Telekom", "Bundesregierung"],
    "es": ["Siemens", "Banco Santander", "Naciones Unidas", "Real Madrid", "Bayern de Múnich",
           "Comisión Europea", "Volkswagen", "Barcelona", "OTAN", "Greenpeace", "Cruz Roja",
           "Banco Mundial", "Iberia", "Telefónica", "PSOE", "Partido Popular", "Interpol", "Airbus",
           "Atlético de Madrid", "Repsol", "Banco de España"],
}
LOC = {
    "en": ["Berlin", "Madrid", "London", "Paris", "Germany", "Spain", "New York", "Buenos Aires",
           "Hamburg", "Seville", "Vienna", "Rome", "Brazil", "Mexico", "Bavaria", "Catalonia",
           "Tokyo", "Cairo", "Lisbon", "Munich", "Barcelona", "Chile", "Poland", "Bonn"],
    "de": ["Berlin", "Madrid", "London", "Paris", "Deutschland", "Spanien", "New York", "Hamburg",
           "Sevilla", "Wien", "Rom", "Brasilien", "Mexiko", "Bayern", "Katalonien", "Tokio",
           "Kairo", "Lissabon", "München", "Köln", "Frankfurt", "Polen", "Bonn", "Österreich"],
    "es": ["Berlín", "Madrid", "Londres", "París", "Alemania", "España", "Nueva York", "Buenos Aires",
           "Hamburgo", "Sevilla", "Viena", "Roma", "Brasil", "México", "Baviera", "Cataluña",
           "Tokio", "El Cairo", "Lisboa", "Múnich", "Valencia", "Chile", "Polonia", "Bilbao"],
}
MISC_EVENT = {
    "en": ["World Cup", "Tour de France", "Olympic Games", "Champions League", "Nobel Prize",
           "Davis Cup", "Eurovision Song Contest", "Australian Open"],
    "de": ["Weltmeisterschaft", "Tour de France", "Olympischen Spiele", "Champions League",
           "Nobelpreis", "Davis Cup", "Bundesliga", "Australian Open"],
    "es": ["Mundial", "Tour de Francia", "Juegos Olímpicos", "Liga de Campeones", "Premio Nobel",
           "Copa Davis", "Copa del Rey", "Abierto de Australia"],
}
MISC_ADJ = {
    "en": ["German", "Spanish", "French", "European", "British", "Mexican", "Italian", "Russian",
           "Japanese", "Brazilian", "Dutch", "Polish"],
    "de": ["deutsche", "spanische", "französische", "europäische", "britische", "mexikanische",
           "italienische", "russische", "japanische", "brasilianische", "niederländische"],
    "es": ["alemán", "español", "francés", "europeo", "británico", "mexicano", "italiano", "ruso",
           "japonés", "brasileño", "holandés"],
}

# --- templates: tokens separated by spaces; slots {PER} {ORG} {LOC} {EVENT} {ADJ} --------
TEMPLATES = {
    "en": [
        "{PER} joined {ORG} in {LOC} last year .",
        "The {ADJ} delegation met {PER} at the summit in {LOC} .",
        "{ORG} shares rose 3 percent on Tuesday , traders in {LOC} said .",
        "{PER} scored twice as {ORG} beat {ORG} 3-1 on Sunday .",
        "Police in {LOC} said {PER} was arrested on Friday .",
        "{PER} , a spokesman for {ORG} , declined to comment .",
        "The {ADJ} government announced new taxes on Monday .",
        "{PER} won the {EVENT} on Saturday .",
        "Talks between {ORG} and {ORG} resumed in {LOC} .",
        "{PER} told reporters in {LOC} that the deal was dead .",
        "Heavy rain hit northern {LOC} , officials said .",
        "{ORG} reported a net loss of 12 million dollars .",
        "It was the first visit by a {ADJ} leader to {LOC} since 1990 .",
        "{PER} and {PER} will meet in {LOC} next week .",
        "The company said prices would rise next year .",
        "Shares closed lower in quiet trading .",
        "{PER} ( {LOC} ) finished second in the {EVENT} .",
        "{ORG} said it would cut 2,000 jobs in {LOC} .",
        "The {EVENT} starts in {LOC} on June 12 .",
        "{ADJ} troops left {LOC} on Thursday , {ORG} said .",
        "Analysts expect {ORG} to raise interest rates .",
        "{PER} resigned as chairman of {ORG} .",
        "Thousands of people marched through {LOC} on Saturday .",
        "The match ended in a 0-0 draw .",
        "{PER} was born in {LOC} in 1962 .",
        "Officials from {ORG} arrived in {LOC} on Wednesday .",
    ],
    "de": [
        "{PER} wechselte im vergangenen Jahr zu {ORG} nach {LOC} .",
        "Die {ADJ} Delegation traf {PER} beim Gipfel in {LOC} .",
        "Die Aktien von {ORG} stiegen am Dienstag um drei Prozent , sagten Händler in {LOC} .",
        "{PER} traf zweimal beim 3:1 von {ORG} gegen {ORG} .",
        "Die Polizei in {LOC} nahm {PER} am Freitag fest .",
        "{PER} , ein Sprecher von {ORG} , lehnte eine Stellungnahme ab .",
        "Die {ADJ} Regierung kündigte am Montag neue Steuern an .",
        "{PER} gewann am Samstag die {EVENT} .",
        "Die Gespräche zwischen {ORG} und {ORG} wurden in {LOC} fortgesetzt .",
        "{PER} sagte Journalisten in {LOC} , das Geschäft sei gescheitert .",
        "Starker Regen traf den Norden von {LOC} , teilten Behörden mit .",
        "{ORG} meldete einen Verlust von zwölf Millionen Euro .",
        "{PER} und {PER} treffen sich nächste Woche in {LOC} .",
        "Das Unternehmen erwartet steigende Preise im nächsten Jahr .",
        "Die Aktien schlossen im ruhigen Handel leichter .",
        "{ORG} will in {LOC} 2000 Stellen streichen .",
        "Die {EVENT} beginnt am 12. Juni in {LOC} .",
        "{PER} trat als Vorsitzender von {ORG} zurück .",
        "Tausende Menschen demonstrierten am Samstag in {LOC} .",
        "Das Spiel endete 0:0 .",
        "{PER} wurde 1962 in {LOC} geboren .",
        "Vertreter von {ORG} kamen am Mittwoch in {LOC} an .",
    ],
    "es": [
        "{PER} se unió a {ORG} en {LOC} el año pasado .",
        "La delegación {ADJ} se reunió con {PER} en la cumbre de {LOC} .",
        "Las acciones de {ORG} subieron un 3 por ciento el martes , dijeron operadores en {LOC} .",
        "{PER} marcó dos goles en la victoria de {ORG} ante {ORG} .",
        "La policía de {LOC} detuvo a {PER} el viernes .",
        "{PER} , portavoz de {ORG} , declinó hacer comentarios .",
        "El gobierno {ADJ} anunció nuevos impuestos el lunes .",
        "{PER} ganó el {EVENT} el sábado .",
        "Las conversaciones entre {ORG} y {ORG} se reanudaron en {LOC} .",
        "{PER} dijo a los periodistas en {LOC} que el acuerdo había fracasado .",
        "Fuertes lluvias azotaron el norte de {LOC} , según las autoridades .",
        "{ORG} registró una pérdida de 12 millones de euros .",
        "{PER} y {PER} se reunirán la próxima semana en {LOC} .",
        "La empresa dijo que los precios subirán el próximo año .",
        "Las acciones cerraron a la baja en una sesión tranquila .",
        "{ORG} anunció que eliminará 2.000 empleos en {LOC} .",
        "El {EVENT} comienza en {LOC} el 12 de junio .",
        "{PER} dimitió como presidente de {ORG} .",
        "Miles de personas se manifestaron el sábado en {LOC} .",
        "El partido terminó con empate a cero .",
        "{PER} nació en {LOC} en 1962 .",
        "Representantes de {ORG} llegaron el miércoles a {LOC} .",
    ],
}
SLOT_LABEL = {"PER": "PER", "ORG": "ORG", "LOC": "LOC", "EVENT": "MISC", "ADJ": "MISC"}
Sentence = List[Tuple[str, str]]


def fill(template: str, lang: str, rng: random.Random) -> Sentence:
    """One tagged sentence (token, IOB2 tag) from a template."""
    fillers: Dict[str, Sequence[str]] = {
        "PER": PER, "ORG": ORG[lang], "LOC": LOC[lang], "EVENT": MISC_EVENT[lang], "ADJ": MISC_ADJ[lang],
    }
    out: Sentence = []
    for token in template.split():
        if token.startswith("{") and token.endswith("}"):
            slot = token[1:-1]
            words = rng.choice(fillers[slot]).split()
            label = SLOT_LABEL[slot]
            out.extend((w, ("B-" if i == 0 else "I-") + label) for i, w in enumerate(words))
        else:
            out.append((token, "O"))
    return out


def sentences(lang: str, n: int, seed: int) -> List[Sentence]:
    rng = random.Random(seed)
    return [fill(rng.choice(TEMPLATES[lang]), lang, rng) for _ in range(n)]


def write_conll(path: Path, sents: List[Sentence]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf8") as f:
        f.write("-DOCSTART- O\n\n")
        for sent in sents:
            f.writelines(f"{w} {t}\n" for w, t in sent)
            f.write("\n")


def detokenize(sent: Sentence) -> str:
    text = " ".join(w for w, _ in sent)
    for p in (" .", " ,", " )"):
        text = text.replace(p, p.strip())
    return text.replace("( ", "(")


def write_text(path: Path, sents: List[Sentence]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(detokenize(s) + "\n" for s in sents), encoding="utf8")


def main(out_dir: str) -> None:
    out = Path(out_dir)
    write_conll(out / "en" / "train.conll", sentences("en", 800, seed=1))
    write_conll(out / "en" / "dev.conll", sentences("en", 200, seed=2))
    for lang, seed in (("de", 3), ("es", 4)):
        write_text(out / lang / "train.txt", sentences(lang, 400, seed=seed))
        write_conll(out / lang / "test.conll", sentences(lang, 200, seed=seed + 10))
    print(f"sample corpus written to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "project/sample")
