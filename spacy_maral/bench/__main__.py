from spacy_maral.bench.cli import app

if __name__ == "__main__":
    app()
