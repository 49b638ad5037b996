import "./style.css"; document.getElementById("app")!.textContent = "bench";
