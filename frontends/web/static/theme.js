// Runs before the first paint (a classic script, not a module) so a dark theme never flashes
// light. The choice lives in localStorage ("light", "dark" or "system"); settings.js changes it.
(function () {
  "use strict";
  var choice = "system";
  try {
    choice = localStorage.getItem("everchat-theme") || "system";
  } catch (error) {
    // storage refused (private mode): the system theme it is
  }
  if (choice === "light" || choice === "dark") {
    document.documentElement.setAttribute("data-theme", choice);
  }
})();
