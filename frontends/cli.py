def main():
    print("everchat")
