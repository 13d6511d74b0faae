// articles.js: the "articles" collection into the Meilisearch index
// "articles". Only published articles are indexed (a draft, or an article
// unpublished later, is removed from the index); the body is cut to 500
// characters; tags are trimmed, lower-cased and duplicates dropped; dates
// are epoch milliseconds, which Meilisearch can sort and filter on. The
// primary key "id" is added from _id.
const MAX_BODY = 500;

function normaliseTags(tags) {
  if (!Array.isArray(tags)) return [];
  const out = [];
  for (let i = 0; i < tags.length; i++) {
    if (typeof tags[i] !== "string") continue;
    const t = tags[i].trim().toLowerCase();
    if (t !== "" && out.indexOf(t) < 0) out.push(t);
  }
  return out;
}

module.exports = {
  collection: "articles",
  index: "articles",
  primaryKey: "id",
  dates: "epoch",
  settings: {
    searchableAttributes: ["title", "summary", "body", "tags", "author"],
    filterableAttributes: ["tags", "author", "publishedAt"],
    sortableAttributes: ["publishedAt", "updatedAt"],
  },

  transform(doc, ctx) {
    if (doc.status !== "published") return null;
    let body = typeof doc.body === "string" ? doc.body : "";
    if (body.length > MAX_BODY) body = body.slice(0, MAX_BODY) + "...";
    return {
      title: doc.title,
      summary: doc.summary || "",
      body: body,
      tags: normaliseTags(doc.tags),
      author: doc.author ? doc.author.name : null,
      publishedAt: doc.publishedAt,
      updatedAt: doc.updatedAt,
    };
  },

  // MongoDB Extended JSON; `meilistream check` prints what each becomes.
  samples: [
    {
      _id: { $oid: "65f1c0a2b3c4d5e6f7a8b9c0" },
      status: "published",
      title: "Change streams in practice",
      summary: "Resume tokens, history and what can go wrong.",
      body: "A change stream is a cursor over the oplog...",
      tags: [" MongoDB ", "change streams", "mongodb", 42],
      author: { name: "Ada", email: "ada@example.com" },
      publishedAt: { $date: "2024-03-13T09:00:00Z" },
      updatedAt: { $date: "2024-03-14T17:30:00Z" },
    },
    { _id: { $oid: "65f1c0a2b3c4d5e6f7a8b9c1" }, status: "draft", title: "Not yet" },
  ],
};
