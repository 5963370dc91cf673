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
LIMIT = 400  # tokens: none of the answers may be longer
