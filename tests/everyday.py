"""Everyday prompts, the kind a newcomer sends first: questions, lists, a haiku, a short email,
code, a translation. At default settings each answer must end by itself (issue 41): shared by
tests/e2e/test_answers_end.py and bench/everyday.py."""

PROMPTS = (
    "Name three colours.",
    "Write a haiku about the sea.",
    "What is the capital of France?",
    "Give me a list of five fruits.",
    "Write a short email to my landlord saying the kitchen tap is leaking.",
    "Write a Python function that reverses a string.",
    "Translate 'Good morning, how are you?' into Spanish.",
    "What is 12 times 7?",
    "Explain what a black hole is in two sentences.",
    "Write a limerick about a cat.",
    "List the days of the week.",
    "Tell me a joke.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "What are three tips for sleeping better?",
    "Write a SQL query that counts the rows of a table named users.",
    "How do I make a cup of tea?",
    "Write a short poem about autumn.",
    "What does HTTP stand for?",
    "Suggest a name for a pet goldfish.",
    "Write a thank-you note to a friend who lent me a book.",
    "Convert 100 degrees Fahrenheit to Celsius.",
    "Write a JavaScript function that adds two numbers.",
    "What is the difference between weather and climate?",
    "Give me a recipe for pancakes.",
)
LIMIT = 400  # tokens: none of the answers should be longer
# short questions with one right answer (a regular expression over the lowercased answer): the
# loop-ending defaults must not cost right answers (bench/everyday.py --questions)
QUESTIONS = (
    ("What is the capital of France? Answer in one word.", "paris"),
    ("What is the capital of Japan?", "tokyo"),
    ("What is 2 + 2?", "4|four"),
    ("Who wrote Romeo and Juliet?", "shakespeare"),
    ("What color is the sky on a clear day?", "blue"),
    ("How many days are in a week?", "7|seven"),
    ("What is the largest planet in the solar system?", "jupiter"),
    ("What is the boiling point of water in Celsius?", "100"),
    ("What language is spoken in Spain?", "spanish"),
    ("What is the chemical symbol for gold?", "au"),
    ("How many legs does a spider have?", "8|eight"),
    ("What is the opposite of hot?", "cold"),
    ("Which animal is known as the king of the jungle?", "lion"),
    ("What is the freezing point of water in Fahrenheit?", "32"),
    ("Name the first month of the year.", "january"),
    ("What do bees make?", "honey"),
)
